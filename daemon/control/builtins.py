"""The daemon's own control commands: ``ping``, ``trigger``, ``status``, ``pause``, ``resume``.

``trigger`` goes through the very callback the hotkey source calls (:class:`DaemonControl`'s
``trigger``), so a press over the socket takes the same path as a key press: the wait for
released keys, the focus target, capture, the focus guard and insertion are all the same.
No answer carries captured or completed text, only its length.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, get_args

from anyfill.config.model import Settings
from anyfill.daemon.control import protocol
from anyfill.daemon.control.commands import CommandError, Commands, optional_bool, require_choice
from anyfill.daemon.desktop.hotkeys import Action
from anyfill.daemon.desktop.pipeline import Outcome, Pipeline

ACTIONS: tuple[str, ...] = get_args(Action)


@dataclass
class DaemonControl:
    """What the built-in commands drive and read."""

    settings: Settings
    pipeline: Pipeline
    trigger: Callable[[Action], None]
    """The hotkey source's callback: a control ``trigger`` is a key press."""
    desktop: str = ""
    """The desktop route in use (``x11``, later ``wayland``)."""
    started: float = field(default_factory=time.time)


def install_builtins(commands: Commands, daemon: DaemonControl) -> None:
    version = _version()

    def ping(args: dict[str, Any]) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "version": version,
            "protocol": protocol.VERSION,
            "ui": commands.ui,
            "commands": commands.summaries(),
        }

    async def trigger(args: dict[str, Any]) -> dict[str, Any]:
        action: Action = require_choice(args, "action", ACTIONS)  # type: ignore[assignment]
        wait = optional_bool(args, "wait")
        pipeline = daemon.pipeline
        if pipeline.paused and action != "cancel":
            raise CommandError(
                "anyfill is paused; resume it from the tray or with 'anyfill resume'", "paused"
            )
        before = pipeline.current
        daemon.trigger(action)
        answer: dict[str, Any] = {"accepted": True, "action": action}
        task = pipeline.current
        if wait and action != "cancel" and task is not None and task is not before:
            # asyncio.wait, not await: a client going away must not cancel the press.
            await asyncio.wait([task])
            cancelled = task.cancelled()
            outcome = Outcome(action, "cancelled", "cancelled") if cancelled else task.result()
            answer["outcome"] = outcome_summary(outcome)
        return answer

    def status(args: dict[str, Any]) -> dict[str, Any]:
        pipeline = daemon.pipeline
        last = pipeline.history[-1] if pipeline.history else None
        hotkeys = daemon.settings.hotkeys
        return {
            "pid": os.getpid(),
            "version": version,
            "ui": commands.ui,
            "desktop": daemon.desktop,
            "state": "paused" if pipeline.paused else "working" if pipeline.busy else "idle",
            "uptime_s": round(time.time() - daemon.started, 1),
            "backends": list(daemon.settings.routing.default),
            "hotkeys": {
                "complete": hotkeys.complete,
                "preview": hotkeys.preview,
                "cancel": hotkeys.cancel,
            },
            "presses": len(pipeline.history),
            "last": outcome_summary(last) if last is not None else None,
            "sections": commands.status_sections(),
        }

    def pause(args: dict[str, Any]) -> dict[str, Any]:
        daemon.pipeline.paused = True
        return {"state": "paused"}

    def resume(args: dict[str, Any]) -> dict[str, Any]:
        daemon.pipeline.paused = False
        return {"state": "working" if daemon.pipeline.busy else "idle"}

    commands.register("ping", ping, summary="pid, version, protocol, attached UI, commands")
    commands.register(
        "trigger",
        trigger,
        summary="act like a hotkey press: {action: complete|preview|cancel, wait?: bool}",
    )
    commands.register("status", status, summary="state, backends, hotkeys, last outcome")
    commands.register("pause", pause, summary="ignore hotkey presses until resume")
    commands.register("resume", resume, summary="act on hotkey presses again")


def outcome_summary(outcome: Outcome) -> dict[str, Any]:
    """One press without its text: what happened, where, how, how long, how many chars."""
    return {
        "action": outcome.action,
        "status": outcome.status,
        "reason": outcome.reason,
        "app": outcome.app,
        "method": outcome.method,
        "capture": outcome.capture,
        "ms": round(outcome.ms, 1),
        "chars": len(outcome.middle or ""),
        "finished": outcome.finished,
        "age_s": round(max(time.time() - outcome.finished, 0.0), 1),
    }


def _version() -> str:
    try:
        return metadata.version("anyfill")
    except metadata.PackageNotFoundError:  # running from a tree that was never installed
        return "0+unknown"
