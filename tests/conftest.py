"""Test-session settings shared by every test folder."""

import os

from hypothesis import settings

# CI is the landing gate: the same examples on every run, so a build never passes or fails
# by the draw. Developers' runs keep drawing new examples (and keep a database of failures).
settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    settings.load_profile("ci")
