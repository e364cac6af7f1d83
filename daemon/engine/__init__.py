"""anyfill.daemon.engine.engine: the request path, context in and exact middle out.

``engine`` (the ``Completer`` every caller uses: trims the context, plans the prompt,
dispatches, cleans the answer), ``dispatch`` (the sequential alternative to the scheduler),
``swappable`` (the completer that changes engine on a settings reload), ``trial`` (the
settings panel's Test). The shared request types are in ``anyfill.daemon.completion``.
"""
