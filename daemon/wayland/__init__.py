"""The desktop path in a native Wayland session: AT-SPI, wl-clipboard, portals, compositor IPC.

Chosen at start by :func:`anyfill.daemon.wayland.session.is_wayland`. The ports are those of
:mod:`anyfill.daemon.desktop.ports`; :mod:`anyfill.daemon.wayland.desktop` assembles them.
"""
