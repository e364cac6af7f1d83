"""``anyfill doctor``: check the set-up a completion needs and say what to fix.

Every check is read-only: it sends no completion, types nothing and leaves the clipboard
alone. Backends are asked for their health concurrently, each bounded by its connect
timeout, so a dead server costs seconds, not minutes.
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
from anyfill.daemon.errors import AnyfillError

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
    findings += await asyncio.gather(*(_backend(b, environ) for b in enabled))
    findings.append(await _broker(settings, environ))
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
        try:
            async with asyncio.timeout(config.timeouts.connect_s + 5):
                await backend.health()
        except TimeoutError:
            return Finding("fail", topic, f"{config.url} did not answer within the timeout")
        except AnyfillError as exc:
            return Finding("fail", topic, str(exc))
        finally:
            close = getattr(backend, "aclose", None)  # a broker connection (type mqtt)
            if close is not None:
                await close()
    ms = (time.monotonic() - started) * 1000
    model = f", model {config.model}" if config.model else ""
    return Finding("ok", topic, f"{config.type} at {config.url}{model} answers ({ms:.0f} ms)")


async def _broker(settings: Settings, environ: Mapping[str, str]) -> Finding:
    """With ``[mqtt]`` on: can this machine reach the broker with these credentials?"""
    mqtt = settings.mqtt
    if not mqtt.enabled:
        return Finding("ok", "broker", "MQTT is off: everything stays in this process")
    import aiomqtt

    from anyfill.daemon.mqtt.connection import BrokerClient, spec_from_config

    spec = spec_from_config(mqtt, client_id=f"anyfill-doctor-{os.getpid()}", environ=environ)
    started = time.monotonic()
    try:
        async with asyncio.timeout(10), BrokerClient(spec):
            pass
    except (aiomqtt.MqttError, OSError, TimeoutError) as exc:
        reason = str(exc) or type(exc).__name__
        return Finding("fail", "broker", f"broker {spec.url} is unreachable: {reason}")
    ms = (time.monotonic() - started) * 1000
    auth = "authenticated" if spec.authenticated else "anonymous"
    return Finding(
        "ok",
        "broker",
        f"{spec.url} (MQTT {spec.protocol}, {auth}) as node {mqtt.node} ({ms:.0f} ms)",
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
