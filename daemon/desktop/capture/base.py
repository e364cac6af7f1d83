"""The capture chain: strategies tried in the configured order until one answers."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from anyfill.config.model import CaptureConfig, CaptureStrategy
from anyfill.daemon.context import CaretRect, Context
from anyfill.daemon.desktop.apprules import AppSettings
from anyfill.daemon.desktop.capture.late_claims import LateClaims
from anyfill.daemon.desktop.ports import Target, Which
from anyfill.daemon.errors import CaptureError, SecureField

log = logging.getLogger("anyfill.capture")


@dataclass(frozen=True)
class Captured:
    """The context sent to the backend plus the untrimmed text (clipboard mode returns it)."""

    context: Context
    whole_prefix: str
    whole_suffix: str
    late: LateClaims | None = None
    """Keyboard capture: the watch for the app's late claims caused by our keys; the
    pipeline waits for it before inserting and fails the press if it found the capture
    invalid."""
    source: Which = "clipboard"
    """Clipboard mode: the selection the marked text came from (PRIMARY in terminals)."""


class Strategy(Protocol):
    name: CaptureStrategy

    async def capture(self, target: Target, app: AppSettings) -> Captured:
        """Read the text around the caret, or raise CaptureError saying why not."""
        ...


@runtime_checkable
class ReadBack(Protocol):
    """A strategy that can read the text before the caret again, to check an insertion."""

    async def read_back(self, target: Target, app: AppSettings) -> str | None:
        """The text before the caret now; None when it cannot be read."""
        ...


@runtime_checkable
class ReadBackAround(Protocol):
    """A strategy that reads both sides of the caret again (the accessibility capture):
    the check then also sees text lost or added after the caret."""

    async def read_back_around(self, target: Target, app: AppSettings) -> tuple[str, str] | None:
        """The text before and after the caret now; None when it cannot be read."""
        ...


def trimmed(
    prefix: str,
    suffix: str,
    target: Target,
    method: CaptureStrategy,
    limits: CaptureConfig,
    *,
    caret: CaretRect | None = None,
) -> Captured:
    """What a strategy read, cut to the configured ``max_prefix_chars`` / ``max_suffix_chars``."""
    max_prefix = limits.max_prefix_chars
    context = Context(
        prefix=prefix[len(prefix) - max_prefix :] if max_prefix else "",
        suffix=suffix[: limits.max_suffix_chars],
        app=target.app,
        window_id=target.window_id,
        caret=caret,
        method=method,
    )
    return Captured(context, prefix, suffix)


async def capture(
    target: Target, app: AppSettings, strategies: Mapping[CaptureStrategy, Strategy]
) -> Captured:
    """Try ``app.capture`` in order; a password field stops the chain at once."""
    reasons: list[str] = []
    for name in app.capture:
        strategy = strategies.get(name)
        if strategy is None:
            reasons.append(f"{name}: not available here")
            continue
        try:
            captured = await strategy.capture(target, app)
        except SecureField:
            raise
        except CaptureError as exc:
            log.debug("capture by %s failed: %s", name, exc)
            reasons.append(f"{name}: {exc}")
            continue
        log.debug(
            "captured by %s: prefix %d, suffix %d chars",
            name,
            len(captured.context.prefix),
            len(captured.context.suffix),
        )
        return captured
    raise CaptureError("could not read the text around the caret (" + "; ".join(reasons) + ")")
