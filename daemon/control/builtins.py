"""The daemon's own control commands: ``ping``, ``trigger``, ``status``, ``pause``, ``resume``.

Every command goes through :class:`~anyfill.daemon.core.Core`, the daemon's one command
interface: ``trigger`` is ``Core.trigger``, the very callback the hotkey source calls, so a
press over the socket takes the same path as a key press (the wait for released keys, the
focus target, capture, the focus guard and insertion are all the same); ``pause`` and
``resume`` announce themselves to the tray as the tray's own do.
No answer carries captured or completed text, only its length.
"""

from __future__ import annotations

import os
import time
from functools import partial
from typing import Any, get_args

from anyfill.daemon.bus.status import DaemonStatus, PressFinished
from anyfill.daemon.control import protocol
from anyfill.daemon.control.commands import CommandError, Commands, optional_bool, require_choice
from anyfill.daemon.core import Core
from anyfill.daemon.desktop.hotkeys import Action
from anyfill.daemon.desktop.preview import PREVIEW_COMMANDS
from anyfill.daemon.managed.events import ManagedServerChanged
from anyfill.daemon.version import version_string

ACTIONS: tuple[str, ...] = get_args(Action)
WINDOWS = ("settings", "diagnostics")


def managed_summary(event: ManagedServerChanged) -> dict[str, Any]:
    """A managed llama-server's last state for ``status``: where it listens, its process,
    its model, and what to do when it cannot run."""
    return {
        "backend": event.backend,
        "state": event.state,
        "url": event.url,
        "pid": event.pid,
        "model": event.model,
        "detail": event.detail,
        "fix": event.fix,
    }


def install_builtins(commands: Commands, core: Core) -> None:
    """The daemon's commands, each through the :class:`Core` (so the tray hears of a pause
    made over the socket); with a front end attached (``core.ui``), its window and preview
    commands too."""
    version = version_string()

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
        if core.paused and action != "cancel":
            raise CommandError(
                "anyfill is paused; resume it from the tray or with 'anyfill resume'", "paused"
            )
        answer: dict[str, Any] = {"accepted": True, "action": action}
        outcome = await core.press(action, wait=wait)
        if outcome is not None:
            answer["outcome"] = outcome_summary(outcome)
        return answer

    def status(args: dict[str, Any]) -> dict[str, Any]:
        history = core.history
        hotkeys = core.settings.hotkeys
        return {
            "pid": os.getpid(),
            "version": version,
            "ui": commands.ui,
            "desktop": core.desktop,
            "state": core.state,
            "suggestions": core.status().suggestions,
            "uptime_s": round(time.time() - core.started, 1),
            "backends": list(core.settings.routing.default),
            "hotkeys": {
                "complete": hotkeys.complete,
                "preview": hotkeys.preview,
                "cancel": hotkeys.cancel,
            },
            "presses": len(history),
            "last": outcome_summary(history[-1]) if history else None,
            "managed": [managed_summary(event) for event in core.managed_servers()],
            "sections": commands.status_sections(),
        }

    def state_of(status: DaemonStatus) -> dict[str, Any]:
        return {"state": "paused" if status.paused else core.state}

    commands.register("ping", ping, summary="pid, version, protocol, attached UI, commands")
    commands.register(
        "trigger",
        trigger,
        summary="act like a hotkey press: {action: complete|preview|cancel, wait?: bool}",
    )
    commands.register("status", status, summary="state, backends, hotkeys, last outcome")
    commands.register(
        "pause", lambda _: state_of(core.pause()), summary="ignore hotkey presses until resume"
    )
    commands.register(
        "resume", lambda _: state_of(core.resume()), summary="act on hotkey presses again"
    )
    if not core.ui:
        return
    commands.ui = core.ui
    commands.add_status_section(core.ui, lambda: dict(core.ui_status))

    def preview(args: dict[str, Any]) -> dict[str, Any]:
        command = require_choice(args, "command", PREVIEW_COMMANDS)
        return {"done": core.preview_command(command)}  # type: ignore[arg-type]

    def show(window: str, args: dict[str, Any]) -> dict[str, Any]:
        core.show_window(window)
        return {"shown": window}

    commands.register(
        "preview",
        preview,
        summary="accept, dismiss or cycle the visible preview: "
        "{command: accept|dismiss|next|previous}",
    )
    for window in WINDOWS:
        commands.register(
            f"show-{window}",
            partial(show, window),
            summary=f"open the {window} window of the running anyfill",
        )


def outcome_summary(outcome: PressFinished) -> dict[str, Any]:
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
