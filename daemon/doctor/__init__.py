"""anyfill.daemon.doctor.checks: ``anyfill doctor``, read-only checks and their report.

``checks`` (config, backends, keyring, display, the daemon), ``desktop`` (session, tray host,
clipboard route, accessibility, autostart), ``managed`` (the llama-server anyfill runs),
``wayland`` (the Wayland routes), ``report`` (the verdict, exit code, text and JSON).
"""
