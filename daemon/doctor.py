"""``anyfill doctor``: check the set-up a completion needs and say what to fix.

Every check is read-only: it types nothing and leaves the clipboard alone. Backends are
asked for their health concurrently, each bounded by its connect timeout, so a dead server
costs seconds, not minutes. A llama-server also gets one tiny infill (a few tokens): a
server that answers /health may still hold a model that cannot fill in the middle. A
backend that fails while one before it in ``routing.default`` works is a warning: the
chain still answers.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from anyfill.config.model import BackendConfig, Settings
from anyfill.config.secrets import resolve_api_key
from anyfill.daemon.backends.base import Backend
from anyfill.daemon.errors import AnyfillError, error_text

Status = Literal["ok", "warn", "fail"]

__all__ = ["Finding", "diagnose", "render"]


@dataclass(frozen=True)
class Finding:
    status: Status
    topic: str
    detail: str


async def diagnose(
    settings: Settings, config_path: Path, environ: Mapping[str, str] | None = None
) -> list[Finding]:
    """Every check, in the order a user would fix things."""
    environ = os.environ if environ is None else environ
    findings = [_config_file(config_path)]
    enabled = [backend for backend in settings.backends if backend.enabled]
    checked = await asyncio.gather(*(_backend(b, environ) for b in enabled))
    findings += _fallbacks_warn(settings, enabled, list(checked))
    findings += [
        _routing(settings),
        _keyring(),
        _display(environ),
        _accessibility(settings),
    ]
    return findings


def render(findings: list[Finding]) -> str:
    width = max(len(finding.topic) for finding in findings)
    return "\n".join(
        f"{finding.status:<4} {finding.topic:<{width}}  {finding.detail}" for finding in findings
    )


def _config_file(path: Path) -> Finding:
    if path.exists():
        return Finding("ok", "config", f"{path} is valid")
    return Finding(
        "ok", "config", f"no file at {path}: using the defaults ('anyfill config init' writes one)"
    )


def _fallbacks_warn(
    settings: Settings, enabled: list[BackendConfig], checked: list[Finding]
) -> list[Finding]:
    """A failing backend behind a working one in the chain (or outside the chain while the
    chain works) only warns: completions still come."""
    by_name = {config.name: finding for config, finding in zip(enabled, checked, strict=True)}
    chain = [name for name in settings.routing.default if name in by_name]
    first_ok = next((name for name in chain if by_name[name].status == "ok"), None)
    result = []
    for config, finding in zip(enabled, checked, strict=True):
        name = config.name
        behind = first_ok is not None and (
            name not in chain or chain.index(name) > chain.index(first_ok)
        )
        if finding.status == "fail" and behind:
            role = "a fallback" if name in chain else "not in routing.default"
            detail = f"{finding.detail} ({role}; '{first_ok}' answers)"
            result.append(Finding("warn", finding.topic, detail))
        else:
            result.append(finding)
    return result


#: The tiny infill a llama-server must answer: it proves the model can fill in the middle.
PROBE_PREFIX = "def add(a, b):\n    return "
PROBE_SUFFIX = "\n\nprint(add(1, 2))\n"


async def _can_infill(backend: Backend) -> str:
    """Ask for a few tokens of a middle; returns how the backend asked (native or a
    template). Raises the backend's error when its model cannot fill in the middle."""
    from anyfill.daemon.backends.base import FimPrompt, Plan
    from anyfill.daemon.backends.common import closing_stream

    plans: list[Plan] = []

    class Watch:
        def on_response(self, status: int, headers: Mapping[str, str]) -> None:
            pass

        def on_usage(self, usage: object) -> None:
            pass

        def on_plan(self, plan: Plan) -> None:
            plans.append(plan)

    prompt = FimPrompt(prefix=PROBE_PREFIX, suffix=PROBE_SUFFIX, max_tokens=4)
    async with closing_stream(backend.stream(prompt, Watch())) as chunks:
        async for _ in chunks:
            pass
    plan = plans[-1] if plans else None
    if plan is None or plan.mode == "native":
        return "fills in the middle natively (/infill)"
    return f"fills in the middle with the '{plan.template}' template ({plan.note or 'configured'})"


async def _backend(config: BackendConfig, environ: Mapping[str, str]) -> Finding:
    from anyfill.daemon.backends.http import make_client
    from anyfill.daemon.backends.registry import create_backend

    topic = f"backend {config.name}"
    try:
        key = resolve_api_key(config, environ)
    except AnyfillError as exc:
        return Finding("fail", topic, str(exc))
    async with make_client(config) as client:
        backend = create_backend(config, client, key)
        started = time.monotonic()
        infill = ""
        try:
            async with asyncio.timeout(config.timeouts.connect_s + 5):
                await backend.health()
            ms = (time.monotonic() - started) * 1000
            if config.type == "llamacpp":
                async with asyncio.timeout(config.timeouts.total_s + 5):
                    infill = "; " + await _can_infill(backend)
        except TimeoutError:
            return Finding("fail", topic, f"{config.url} did not answer within the timeout")
        except AnyfillError as exc:
            return Finding("fail", topic, error_text(exc))
    model = f", model {config.model}" if config.model else ""
    return Finding(
        "ok", topic, f"{config.type} at {config.url}{model} answers ({ms:.0f} ms){infill}"
    )


def _routing(settings: Settings) -> Finding:
    disabled = [name for name in settings.routing.default if not settings.backend(name).enabled]
    chain = " -> ".join(settings.routing.default) or "(empty)"
    if disabled:
        return Finding("warn", "routing", f"{chain}; disabled: {', '.join(disabled)}")
    if not settings.routing.default:
        return Finding("fail", "routing", "routing.default names no backend")
    return Finding("ok", "routing", chain)


def _keyring() -> Finding:
    import keyring
    import keyring.backends.fail

    backend = keyring.get_keyring()
    if isinstance(backend, keyring.backends.fail.Keyring):
        return Finding(
            "warn",
            "keyring",
            "no system keyring: API keys must come from environment variables",
        )
    name = f"{type(backend).__module__}.{type(backend).__name__}"
    if "plaintext" in name.lower():
        return Finding("warn", "keyring", f"{name} stores API keys unencrypted in a file")
    return Finding("ok", "keyring", name)


def _display(environ: Mapping[str, str]) -> Finding:
    if not sys.platform.startswith("linux"):
        return Finding(
            "fail",
            "desktop",
            f"hotkeys, capture and insertion are not implemented on {sys.platform}",
        )
    name = environ.get("DISPLAY", "")
    if not name:
        hint = " (a Wayland session needs Xwayland)" if environ.get("WAYLAND_DISPLAY") else ""
        return Finding("fail", "desktop", f"DISPLAY is not set: hotkeys need an X11 session{hint}")
    from Xlib import display, error

    try:
        connection = display.Display(name)
    except (error.DisplayError, error.ConnectionClosedError, OSError) as exc:
        return Finding("fail", "desktop", f"cannot open the X display {name!r}: {exc}")
    try:
        missing = [ext for ext in ("XTEST",) if not connection.has_extension(ext)]
    finally:
        connection.close()
    if missing:
        return Finding("fail", "desktop", f"X display {name} lacks {', '.join(missing)}")
    return Finding("ok", "desktop", f"X display {name} with XTEST")


def _accessibility(settings: Settings) -> Finding:
    wanted = "accessibility" in settings.capture.strategies
    if importlib.util.find_spec("gi") is None:
        status: Status = "warn" if wanted else "ok"
        return Finding(
            status,
            "accessibility",
            "off: PyGObject is not installed (pip install 'anyfill[atspi]'); "
            "keyboard capture is used",
        )
    return Finding("ok", "accessibility", "PyGObject found; AT-SPI is tried first")
