"""What the managed server publishes on the bus, for the tray and MQTT (no captured text)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ServerState = Literal[
    "stopped",
    "starting",
    "ready",
    "restarting",
    "failed",
    "missing_binary",
    "missing_model",
]


@dataclass(frozen=True)
class ManagedServerChanged:
    """The managed llama-server of ``backend`` changed state.

    ``detail`` says what happened in a sentence; ``fix`` is what the user can do (a command
    or a setting), empty when nothing is to be done. ``model_size``/``model_dir`` let the
    tray ask before a download (``missing_model``)."""

    backend: str
    state: ServerState
    detail: str = ""
    fix: str = ""
    url: str = ""
    pid: int | None = None
    model: str = ""
    model_size: int = 0
    model_dir: str = ""

    @property
    def topic(self) -> str:
        return f"state/backends/{self.backend}/server"
