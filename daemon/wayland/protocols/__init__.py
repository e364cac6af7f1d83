"""Wayland protocols pywayland does not ship, transcribed from their specifications."""
