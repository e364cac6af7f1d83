"""Qt tests run on the offscreen platform: no display, no tray host."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
