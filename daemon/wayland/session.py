"""Which kind of session this is, and which compositor runs it (from the environment)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

Compositor = Literal["sway", "hyprland", "kde", "gnome", "other"]


def is_wayland(environ: Mapping[str, str] | None = None) -> bool:
    """A Wayland session: ``XDG_SESSION_TYPE=wayland``, or a ``WAYLAND_DISPLAY`` with no X
    display beside it (a session manager that does not set the type)."""
    env = os.environ if environ is None else environ
    kind = env.get("XDG_SESSION_TYPE", "").lower()
    if kind == "wayland":
        return bool(env.get("WAYLAND_DISPLAY"))
    if kind == "x11":
        return False
    return bool(env.get("WAYLAND_DISPLAY")) and not env.get("DISPLAY")


def compositor(environ: Mapping[str, str] | None = None) -> Compositor:
    env = os.environ if environ is None else environ
    desktops = env.get("XDG_CURRENT_DESKTOP", "").lower().split(":")
    if env.get("SWAYSOCK") or "sway" in desktops:
        return "sway"
    if env.get("HYPRLAND_INSTANCE_SIGNATURE") or "hyprland" in desktops:
        return "hyprland"
    if "kde" in desktops:
        return "kde"
    if "gnome" in desktops:
        return "gnome"
    return "other"


def has_data_control(kind: Compositor) -> bool:
    """wlroots compositors and KWin offer a data-control protocol (wl-clipboard works without
    a focused window); Mutter does not (GNOME goes through the Clipboard portal)."""
    return kind in ("sway", "hyprland", "kde")


def has_virtual_keyboard(kind: Compositor) -> bool:
    """zwp_virtual_keyboard_v1 (what wtype speaks) is a wlroots protocol."""
    return kind in ("sway", "hyprland")


def runtime_dir(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    return Path(env.get("XDG_RUNTIME_DIR") or f"/run/user/{os.getuid()}")


def display_path(environ: Mapping[str, str] | None = None) -> Path:
    """The compositor's socket: ``WAYLAND_DISPLAY`` as a path, or a name in the runtime dir."""
    env = os.environ if environ is None else environ
    name = env.get("WAYLAND_DISPLAY", "") or "wayland-0"
    return Path(name) if name.startswith("/") else runtime_dir(env) / name
