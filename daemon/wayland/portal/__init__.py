"""XDG desktop portals over D-Bus (dbus-fast): GlobalShortcuts, RemoteDesktop, Clipboard."""
