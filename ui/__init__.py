"""The PySide6 tray, preview popup and settings panel (the only Qt code)."""
