"""The settings panel's Test button: one real, short completion through the engine.

It answers what a user setting up a backend wants to know: did it work, what came back, how
long it took, and how anyfill asked (the server's native FIM endpoint, a client-side FIM
template and which, or a chat prompt). A failure is the backend's own error, which already
says how to fix it ("nothing listens on ...; start the server or fix the URL").
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from anyfill.config.model import BackendConfig, RoutingConfig, Settings
from anyfill.daemon.backends.base import Backend, Plan
from anyfill.daemon.backends.http import make_client
from anyfill.daemon.backends.registry import create_backend
from anyfill.daemon.completion import CompletionRequest
from anyfill.daemon.context import Context
from anyfill.daemon.engine.dispatch import SequentialDispatcher
from anyfill.daemon.engine.engine import Engine
from anyfill.daemon.errors import AnyfillError
from anyfill.daemon.log import register_secret

__all__ = ["TRIAL_CONTEXT", "TrialResult", "describe_plan", "try_backend"]

#: A prompt every code model completes in a few tokens.
TRIAL_CONTEXT = Context(prefix="def add(a, b):\n    return ", suffix="\n\n\nprint(add(2, 3))\n")
TRIAL_MAX_TOKENS = 16
ANSWER_SHOWN = 60


@dataclass(frozen=True)
class TrialResult:
    backend: str
    ok: bool
    answer: str = ""
    ms: float = 0.0
    mode: str = ""
    """How the backend was asked, in words: "native FIM", "FIM template qwen", "chat"."""
    error: str = ""

    def summary(self) -> str:
        if not self.ok:
            return self.error
        answer = self.answer.strip()
        if len(answer) > ANSWER_SHOWN:
            answer = answer[:ANSWER_SHOWN] + "…"
        shown = repr(answer) if answer else "(an empty answer)"
        return f"{shown} in {self.ms:.0f} ms, {self.mode}"


def describe_plan(plan: Plan) -> str:
    if plan.mode == "native":
        text = "native FIM"
        if plan.template:
            text += f" (server template {plan.template})"
    elif plan.mode == "template":
        text = f"FIM template {plan.template or '?'}"
    else:
        text = "chat (infill prompt)"
    if plan.note:
        text += f"; {plan.note}"
    return text


async def try_backend(
    config: BackendConfig,
    environ: Mapping[str, str] | None = None,
    *,
    api_key: str | None = None,
) -> TrialResult:
    """Send :data:`TRIAL_CONTEXT` to ``config`` alone (enabled or not); never raises for a
    backend's failure, which comes back in ``error``.

    ``api_key``: a key typed but not stored yet, tried instead of the keyring's."""
    config = config.model_copy(update={"enabled": True})
    settings = Settings(backends=[config], routing=RoutingConfig(default=[config.name]))

    def dispatcher(backends: Mapping[str, Backend], _: Settings) -> SequentialDispatcher:
        return SequentialDispatcher(
            backends, [config.name], fallback=False, unusable=engine.unusable
        )

    client = None
    given: dict[str, Backend] | None = None
    started = time.monotonic()
    try:
        if api_key:
            register_secret(api_key)
            client = make_client(config)
            # create_backend refuses a key meant for plain http:// to another host.
            given = {config.name: create_backend(config, client, api_key.strip())}
        engine = Engine(settings, dispatcher, environ=environ, backends=given)
        async with engine:
            done = await engine.complete(
                CompletionRequest(TRIAL_CONTEXT, max_tokens=TRIAL_MAX_TOKENS)
            )
    except AnyfillError as exc:
        return TrialResult(config.name, False, ms=_ms(started), error=str(exc))
    finally:
        if client is not None:
            await client.aclose()
    return TrialResult(config.name, True, done.middle, done.ms, describe_plan(done.plan))


def _ms(started: float) -> float:
    return (time.monotonic() - started) * 1000
