"""anyfill.daemon.settings: the settings of the running daemon.

``live`` holds the settings in force, which every part reads when it needs a value, and tells
who listens which sections changed; ``reload`` watches the file and validates each new
version before it is put in force.
"""
