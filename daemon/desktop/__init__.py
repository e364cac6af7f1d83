"""anyfill.daemon.desktop.ports: one press in a desktop application, from the hotkey to the text
in the app.

``ports`` names what a platform provides (keys, clipboard, windows, hotkeys, direct insertion,
the popup's keys); ``pipeline`` runs one press (capture, complete, guard, insert, read back);
``preview`` the popup's decisions; ``capture/`` and ``inject/`` the strategies either side of
the completion; ``hotkeys`` and ``apprules`` what a press means in which app. The platforms
themselves (``anyfill.daemon.x11``, ``anyfill.daemon.wayland``) implement the ports.
"""
