"""anyfill's icons, installed with the wheel as ``anyfill.assets`` (data only, no code).

``icons/hicolor/`` follows the freedesktop icon theme layout, so installing is a copy:
``scalable/apps/anyfill.svg`` is the source, the PNG sizes are rendered from it by
``packaging/generate``.
"""
