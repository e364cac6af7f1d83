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
from anyfill.daemon.errors import (
    AnyfillError,
    BadRequest,
    ProtocolError,
    ServerError,
    error_text,
)

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
    servers = [b for b in enabled if b.type != "llamacpp-managed"]
    checked = await asyncio.gather(*(_backend(b, environ) for b in servers))
    findings += _fallbacks_warn(settings, servers, list(checked))
    findings += await _managed(settings, [b for b in enabled if b.type == "llamacpp-managed"])
    findings = _covered_by_managed(settings, findings)
    findings.append(await _broker(settings, environ))
    if settings.mqtt.enabled and settings.mqtt.allow_remote_insert:
        findings.append(_remote_insert(settings, environ))
    findings += [_routing(settings), _keyring()]
    from anyfill.daemon.wayland.session import is_wayland

    if sys.platform.startswith("linux") and is_wayland(environ):
        from anyfill.daemon.doctor.wayland import wayland_report

        findings += [Finding(*line) for line in await wayland_report(environ)]
    else:
        findings.append(_display(environ))
    findings.append(_accessibility(settings))
    findings.append(_daemon())
    findings += desktop_findings(environ)
    return findings


def desktop_findings(environ: Mapping[str, str]) -> list[Finding]:
    """Session, tray, clipboard, accessibility bus, autostart (daemon/doctor/desktop.py)."""
    from anyfill.daemon.doctor.desktop import desktop_lines

    return [Finding(*line) for line in desktop_lines(environ)]


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
                try:
                    async with asyncio.timeout(config.timeouts.total_s + 5):
                        infill = "; " + await _can_infill(backend)
                except (TimeoutError, BadRequest, ServerError, ProtocolError) as exc:
                    return _probe_refused(config, ms, exc)
        except TimeoutError:
            return Finding("fail", topic, f"{config.url} did not answer within the timeout")
        except AnyfillError as exc:
            return Finding("fail", topic, error_text(exc))
        finally:
            await backend.aclose()  # a broker connection (type mqtt)
    model = f", model {config.model}" if config.model else ""
    return Finding(
        "ok", topic, f"{config.type} at {config.url}{model} answers ({ms:.0f} ms){infill}"
    )


def _probe_refused(config: BackendConfig, ms: float, exc: BaseException) -> Finding:
    """A warning that says what doctor tried and what failed, not "anyfill cannot work".

    Only for failures that say something about that one request (refused, a 5xx, an answer
    out of protocol, too slow): the server answered /health, and completions of other text
    may well work. A model with no way to fill in the middle (UnsupportedFeature), a refused
    key or an unknown model fail every completion the same way: they stay failures."""
    what = (
        f"did not finish it within {config.timeouts.total_s + 5:.0f} s"
        if isinstance(exc, TimeoutError)
        else f"failed: {error_text(exc)}"
    )
    return Finding(
        "warn",
        f"backend {config.name}",
        f"{config.type} at {config.url} answers /health ({ms:.0f} ms), but doctor's test "
        f"infill (4 tokens between {PROBE_PREFIX!r} and {PROBE_SUFFIX!r}) {what}; "
        f"completions of other text may still work: try 'anyfill complete FILE --backend "
        f"{config.name}' and see the server's log",
    )


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


def _remote_insert(settings: Settings, environ: Mapping[str, str]) -> Finding:
    """``allow_remote_insert`` is on: only requests signed with the insert key type."""
    from anyfill.config.secrets import INSERT_KEY_ENV, resolve_insert_key

    name = settings.mqtt.insert_key
    if resolve_insert_key(name, environ):
        return Finding(
            "ok", "remote insert", "on, for requests signed with the insert key (docs/mqtt.md)"
        )
    return Finding(
        "warn",
        "remote insert",
        "on, but no insert key: every insert request is refused "
        f"(anyfill config set-key {name or 'mqtt-insert'}, or {INSERT_KEY_ENV})",
    )


async def _managed(settings: Settings, managed: list[BackendConfig]) -> list[Finding]:
    """The binary and model of each server anyfill runs itself (never started here)."""
    from anyfill.daemon.doctor.managed import managed_findings

    found = await asyncio.gather(*(managed_findings(b, settings.models) for b in managed))
    return [Finding(status, topic, detail) for lines in found for status, topic, detail in lines]


def _covered_by_managed(settings: Settings, findings: list[Finding]) -> list[Finding]:
    """A local server that is not running is no failure when a usable managed server comes
    after it in the chain: that is the set-up of a user who runs no server of their own."""
    chain = settings.routing.default
    failed = {f.topic for f in findings if f.status == "fail"}
    usable = [
        name
        for name in chain
        if settings.backend(name).type == "llamacpp-managed"
        and f"backend {name} binary" not in failed
        and f"backend {name} model" not in failed
    ]
    if not usable:
        return findings
    last = chain.index(usable[0])
    local = {
        f"backend {name}": settings.backend(name).url
        for name in chain[:last]
        if settings.backend(name).type in ("llamacpp", "ollama")
    }
    return [
        Finding(
            "ok",
            f.topic,
            f"no server at {local[f.topic]}: none needed, '{usable[0]}' (run by anyfill) "
            "serves instead",
        )
        if f.topic in local and f.status == "fail" and "nothing listens" in f.detail
        else f
        for f in findings
    ]


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

    try:
        backend = keyring.get_keyring()
    except Exception as exc:  # noqa: BLE001 (a forced backend's own checks raise anything)
        return Finding(
            "warn",
            "keyring",
            f"the keyring cannot be loaded ({type(exc).__name__}: {exc}): "
            "API keys must come from environment variables",
        )
    if isinstance(backend, keyring.backends.fail.Keyring):
        return Finding(
            "warn",
            "keyring",
            "no system keyring: API keys must come from environment variables",
        )
    name = f"{type(backend).__module__}.{type(backend).__name__}"
    unusable = _keyring_read_fails(backend)
    if unusable:
        return Finding(
            "warn", "keyring", f"{name} cannot be read ({unusable}): use environment variables"
        )
    if "plaintext" in name.lower():
        return Finding("warn", "keyring", f"{name} stores API keys unencrypted in a file")
    return Finding("ok", "keyring", name)


def _keyring_read_fails(backend: object) -> str:
    """Read an entry that does not exist: a locked or absent Secret Service fails here.
    In a daemon thread, bounded: an unlock prompt must neither hang doctor nor its exit."""
    import threading

    outcome: list[str] = []
    get_password = getattr(backend, "get_password")  # noqa: B009

    def probe() -> None:
        try:
            get_password("anyfill", "anyfill-doctor-probe")
        except Exception as exc:  # noqa: BLE001 (keyring backends raise anything, D-Bus to OS)
            outcome.append(f"{type(exc).__name__}: {exc}")
        else:
            outcome.append("")

    thread = threading.Thread(target=probe, name="keyring-probe", daemon=True)
    thread.start()
    thread.join(10)
    return outcome[0] if outcome else "no answer within 10 s: locked?"


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


def _daemon() -> Finding:
    """Whether a daemon answers on the control socket (asked, never created)."""
    from anyfill.daemon.control.client import call
    from anyfill.daemon.errors import ControlError, NotRunning
    from anyfill.daemon.runtime_dir import socket_path

    try:
        path = socket_path()
    except ControlError as exc:
        return Finding("fail", "daemon", str(exc))
    try:
        answer = call("ping", path=path, timeout_s=2.0)
    except NotRunning:
        return Finding("ok", "daemon", f"not running ('anyfill run' starts it; socket {path})")
    except ControlError as exc:
        return Finding("fail", "daemon", f"control socket {path}: {exc}")
    ui = answer.get("ui") or "headless"
    return Finding(
        "ok", "daemon", f"running (pid {answer.get('pid')}, {ui}); control socket {path}"
    )
