"""anyfill.daemon.control: the running daemon's per-user control socket.

``anyfill trigger``, ``anyfill status`` and a second ``anyfill run`` talk to the daemon
through a Unix socket that only its user can reach. The pieces, each in its own module:

- :mod:`.paths`: where the socket and the instance lock live; private directory checks
- :mod:`.protocol`: one JSON line in, one JSON line out, with a version field
- :mod:`.client`: the standard-library-only client (it runs on every shortcut press)
- :mod:`.commands`: the command registry another layer (the tray) adds commands to
- :mod:`.builtins`: ``ping``, ``trigger``, ``status``, ``pause``, ``resume``
- :mod:`.server`: the asyncio server the daemon runs
- :mod:`.instance`: the per-user single-instance lock of ``anyfill run``

This ``__init__`` imports nothing: the client must not pay for the server's imports.
"""
