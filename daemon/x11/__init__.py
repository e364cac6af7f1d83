"""X11 implementation of the desktop ports: one python-xlib connection driven by asyncio.

Everything X11 goes through one :class:`~anyfill.daemon.x11.connection.XConnection` whose
socket is watched by the event loop, so hotkey grabs, selection serving and key injection
all run on the loop's thread without helper threads or subprocesses.
"""
