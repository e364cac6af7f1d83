"""Start anyfill with the user's session: XDG autostart or a systemd user unit on Linux, a
LaunchAgent on macOS, the ``HKCU ... Run`` value on Windows (``anyfill autostart``).

``entries`` renders every file from one place; ``files`` writes them without ever replacing
one the user edited unasked; ``linux``, ``macos`` and ``windows`` install for their system.
"""
