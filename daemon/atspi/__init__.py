"""AT-SPI, Linux's accessibility API, for both desktops (X11 and Wayland alike).

One :class:`~anyfill.daemon.atspi.session.AtspiSession` per process: every libatspi call
runs on its one thread under its one lock, after its one bus check. On top of it:
``tree`` (the one bounded search: the focused text field of a process, the active
window), ``text`` (a field's text and caret in Python indices, converted from and to the
toolkit's offset unit), ``capture`` (the accessibility capture strategy and its read-back),
``insert`` (EditableText insertion, checked against the whole document), ``focus`` (the
active window where no compositor tells), ``events`` (text and caret events over
dbus-fast, not libatspi).

Optional: needs PyGObject with the Atspi typelib (``gir1.2-atspi-2.0``) and an
accessibility bus, detected at run time.
"""
