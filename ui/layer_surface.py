"""The preview popup on Wayland compositors with wlr-layer-shell (sway, Hyprland, KDE).

A Wayland client cannot place its own window, and a new window may take the keyboard
focus. A layer surface can be placed (anchored to the output's top-left corner, with the
caret's position as margins) and, with keyboard interactivity "none", never gets the
keyboard. Qt has no layer-shell support of its own, so the popup widget is rendered into
an image (:meth:`QWidget.grab`) that this module copies into a shared-memory buffer on our
own Wayland connection, once per change of the popup (text streams in a few times a second).

The connection's events are read on the GUI thread when its socket is readable
(:class:`QSocketNotifier`), so everything here runs on one thread.
"""

from __future__ import annotations

import logging
import mmap
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QObject, QSocketNotifier
from PySide6.QtGui import QImage

log = logging.getLogger("anyfill.ui.layer")

NAMESPACE = "anyfill-preview"
"""The layer surface's namespace: what compositor rules (Hyprland layerrule) match."""
_FORMAT_ARGB8888 = 0
FIXED_TOP_MARGIN = 96
"""Where a popup with no caret to go to shows: centred, this far below the output's top
edge (clear of a top panel)."""


@dataclass
class _Frame:
    """One shared-memory buffer; freed when the compositor releases it."""

    buffer: Any
    pool: Any
    memory: mmap.mmap
    fd: int

    def free(self) -> None:
        self.buffer.destroy()
        self.pool.destroy()
        self.memory.close()
        os.close(self.fd)


class LayerPresenter(QObject):
    """Shows images on one overlay layer surface at a position of an output."""

    def __init__(self, display: Any, globals_: dict[str, Any], outputs: dict[str, Any]) -> None:
        super().__init__()
        self._display = display
        self._compositor = globals_["wl_compositor"]
        self._shm = globals_["wl_shm"]
        self._shell = globals_["zwlr_layer_shell_v1"]
        self._outputs = outputs
        self._surface: Any = None
        self._layer: Any = None
        self._configured = False
        self._pending: tuple[QImage, int, int, bool] | None = None
        self._frames: list[_Frame] = []
        self.closed_by_compositor = False
        self.on_frame: Callable[[], None] | None = None
        """Called after each image reached the compositor (the benchmark's clock)."""
        self._notifier = QSocketNotifier(display.get_fd(), QSocketNotifier.Type.Read, self)
        self._notifier.activated.connect(self._read)

    @classmethod
    def connect_default(cls) -> LayerPresenter | None:
        """A presenter on this session's compositor; None where there is no Wayland
        display or the compositor has no layer shell (GNOME)."""
        if not os.environ.get("WAYLAND_DISPLAY"):
            return None
        try:
            from pywayland.client.display import Display
            from pywayland.protocol.wayland import WlCompositor, WlOutput, WlShm

            from anyfill.daemon.wayland.protocols.wlr_layer_shell_unstable_v1 import (
                ZwlrLayerShellV1,
            )
        except ImportError as exc:
            log.info("no layer-shell popup: pywayland is not installed (%s)", exc)
            return None
        display = Display()
        try:
            display.connect()
        except Exception as exc:  # noqa: BLE001 - pywayland raises a bare exception
            log.info("no layer-shell popup: cannot connect to the Wayland display (%s)", exc)
            return None
        wanted = {
            "wl_compositor": (WlCompositor, 4),
            "wl_shm": (WlShm, 1),
            "zwlr_layer_shell_v1": (ZwlrLayerShellV1, 4),
        }
        bound: dict[str, Any] = {}
        outputs: dict[str, Any] = {}

        def on_global(registry: Any, name: int, interface: str, version: int) -> None:
            if interface in wanted:
                kind, newest = wanted[interface]
                bound[interface] = registry.bind(name, kind, min(version, newest))
            elif interface == "wl_output" and version >= 4:
                # Version 4 tells the output's name, which the compositor's IPC uses too.
                output = registry.bind(name, WlOutput, 4)
                output.dispatcher["name"] = lambda _o, label: outputs.__setitem__(label, output)

        registry = display.get_registry()
        registry.dispatcher["global"] = on_global
        display.roundtrip()
        display.roundtrip()  # the outputs' names
        missing = sorted(set(wanted) - set(bound))
        if missing:
            log.info("no layer-shell popup: the compositor lacks %s", ", ".join(missing))
            display.disconnect()
            return None
        return cls(display, bound, outputs)

    # -- showing --------------------------------------------------------------------------

    def present(
        self, image: QImage, x: int, y: int, output: str = "", *, fixed: bool = False
    ) -> None:
        """Show ``image`` with its top-left corner at (x, y) of ``output`` (its name as the
        compositor's IPC reports it; '' or unknown: the compositor's choice, its focused
        output); ``fixed``: centred at the top instead (:data:`FIXED_TOP_MARGIN`)."""
        if self._layer is None:
            self._create(output)
        self._pending = (image, x, y, fixed)
        if self._configured:
            self._commit()
        self._display.flush()

    def hide(self) -> None:
        """Unmap and forget the surface (a new one is made for the next preview, maybe
        on another output)."""
        if self._layer is not None:
            self._layer.destroy()
            self._surface.destroy()
            self._display.flush()
        self._layer = self._surface = None
        self._configured = False
        self._pending = None

    @property
    def showing(self) -> bool:
        return self._layer is not None

    def close(self) -> None:
        self._notifier.setEnabled(False)
        try:
            self.hide()
            self._display.roundtrip()  # the compositor released our buffers
        except (RuntimeError, OSError) as exc:
            log.debug("the compositor went away first: %s", exc)
        for frame in self._frames:
            frame.memory.close()
            os.close(frame.fd)
        self._frames.clear()
        self._display.disconnect()

    def _create(self, output_name: str) -> None:
        from anyfill.daemon.wayland.protocols.wlr_layer_shell_unstable_v1 import (
            ZwlrLayerShellV1,
            ZwlrLayerSurfaceV1,
        )

        self.closed_by_compositor = False
        surface = self._compositor.create_surface()
        output = self._outputs.get(output_name)
        layer = self._shell.get_layer_surface(
            surface, output, ZwlrLayerShellV1.layer.overlay, NAMESPACE
        )
        layer.set_keyboard_interactivity(ZwlrLayerSurfaceV1.keyboard_interactivity.none)
        layer.set_exclusive_zone(-1)  # over panels too: the caret may be next to one
        layer.dispatcher["configure"] = self._on_configure
        layer.dispatcher["closed"] = self._on_closed
        self._surface, self._layer = surface, layer
        # The first commit carries no buffer: the compositor answers with a configure.
        layer.set_size(1, 1)
        surface.commit()

    def _on_configure(self, layer: Any, serial: int, width: int, height: int) -> None:
        if layer is not self._layer:
            return
        layer.ack_configure(serial)
        self._configured = True
        if self._pending is not None:
            self._commit()
        self._display.flush()

    def _on_closed(self, layer: Any) -> None:
        if layer is self._layer:
            log.info("the compositor closed the preview's layer surface")
            self.closed_by_compositor = True
            self.hide()

    def _commit(self) -> None:
        assert self._pending is not None
        assert self._layer is not None
        from anyfill.daemon.wayland.protocols.wlr_layer_shell_unstable_v1 import (
            ZwlrLayerSurfaceV1,
        )

        image, x, y, fixed = self._pending
        self._pending = None
        anchor = ZwlrLayerSurfaceV1.anchor
        # Anchored to the top edge only, the compositor centres it horizontally.
        self._layer.set_anchor(anchor.top if fixed else anchor.top | anchor.left)
        frame = self._frame_for(image)
        # Qt renders at its screen's scale (2 on a HiDPI output): the surface's size is in
        # logical pixels, the buffer says its scale. Fractional scales are rounded.
        scale = max(round(image.devicePixelRatio()), 1)
        self._layer.set_size(image.width() // scale, image.height() // scale)
        if fixed:
            self._layer.set_margin(FIXED_TOP_MARGIN, 0, 0, 0)
        else:
            self._layer.set_margin(y, 0, 0, x)
        self._surface.set_buffer_scale(scale)
        self._surface.attach(frame.buffer, 0, 0)
        self._surface.damage_buffer(0, 0, image.width(), image.height())
        self._surface.commit()
        if self.on_frame is not None:
            self.on_frame()

    def _frame_for(self, image: QImage) -> _Frame:
        image = image.convertToFormat(QImage.Format.Format_ARGB32_Premultiplied)
        stride, height = image.bytesPerLine(), image.height()
        size = stride * height
        fd = os.memfd_create("anyfill-preview", os.MFD_CLOEXEC)
        os.ftruncate(fd, size)
        memory = mmap.mmap(fd, size)
        memory.write(bytes(image.constBits()))
        pool = self._shm.create_pool(fd, size)
        buffer = pool.create_buffer(0, image.width(), height, stride, _FORMAT_ARGB8888)
        frame = _Frame(buffer, pool, memory, fd)
        buffer.dispatcher["release"] = lambda _b: self._release(frame)
        self._frames.append(frame)
        return frame

    def _release(self, frame: _Frame) -> None:
        if frame in self._frames:
            self._frames.remove(frame)
            frame.free()

    def _read(self) -> None:
        try:
            self._display.read()
            self._display.dispatch(block=False)
        except RuntimeError as exc:
            log.warning("the Wayland connection of the preview broke: %s", exc)
            self._notifier.setEnabled(False)
