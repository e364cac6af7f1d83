"""``anyfill doctor``'s verdict and its two outputs: lines for people, JSON for tools.

Exit codes: 0 when anyfill can work (warnings allowed), 1 when a check failed, 2 when the
configuration is broken. With a broken configuration the checks that do not need it (the
desktop, the keyring, the daemon) still run, so one run says everything that is wrong.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anyfill.daemon.doctor.checks import Finding, desktop_findings, diagnose, render
from anyfill.daemon.errors import ConfigError
from anyfill.daemon.log import set_text_shown

if TYPE_CHECKING:
    from anyfill.config.model import Settings

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_CONFIG = 2


def run_doctor(load: Callable[[], Settings], config_path: Path, *, as_json: bool) -> int:
    import click

    findings, code = collect(load, config_path)
    if as_json:
        click.echo(json.dumps(as_dict(findings, code), indent=2, ensure_ascii=False))
    else:
        click.echo(render([*findings, verdict_line(findings, code)]))
    return code


def collect(load: Callable[[], Settings], config_path: Path) -> tuple[list[Finding], int]:
    try:
        settings = load()
    except ConfigError as exc:
        return _without_config(exc, config_path), EXIT_CONFIG
    set_text_shown(settings.privacy.log_text)  # a server's error text only on opt-in
    findings = asyncio.run(diagnose(settings, config_path))
    failed = any(finding.status == "fail" for finding in findings)
    return findings, EXIT_FAILURE if failed else EXIT_OK


def _without_config(exc: ConfigError, config_path: Path) -> list[Finding]:
    from anyfill.config.store import InvalidConfig
    from anyfill.daemon.doctor.checks import _daemon, _display, _keyring

    if isinstance(exc, InvalidConfig):
        problems = "; ".join(problem.render(str(config_path)) for problem in exc.problems)
    else:
        problems = str(exc)
    config = Finding(
        "fail",
        "config",
        f"invalid: {problems} ('anyfill config validate' lists each problem)",
    )
    from anyfill.daemon.wayland.session import is_wayland

    if is_wayland(os.environ):
        from anyfill.daemon.doctor.wayland import wayland_report

        desktop = [Finding(*line) for line in asyncio.run(wayland_report(os.environ))]
    else:
        desktop = [_display(os.environ)]
    return [config, _keyring(), *desktop, _daemon(), *desktop_findings(os.environ)]


def verdict_line(findings: list[Finding], code: int) -> Finding:
    warnings = sum(finding.status == "warn" for finding in findings)
    if code == EXIT_CONFIG:
        return Finding("fail", "verdict", "anyfill cannot start: fix the configuration first")
    if code != EXIT_OK:
        return Finding("fail", "verdict", "anyfill cannot work until the 'fail' lines are fixed")
    if warnings:
        return Finding("ok", "verdict", f"anyfill can work ({warnings} warning(s) above)")
    return Finding("ok", "verdict", "anyfill can work")


def as_dict(findings: list[Finding], code: int) -> dict[str, Any]:
    from anyfill.daemon.version import version_string

    return {
        "version": version_string(),
        "can_work": code == EXIT_OK,
        "exit_code": code,
        "verdict": verdict_line(findings, code).detail,
        "findings": [
            {"status": finding.status, "topic": finding.topic, "detail": finding.detail}
            for finding in findings
        ],
    }
