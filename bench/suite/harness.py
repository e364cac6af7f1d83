"""Shared pieces of the benchmarks: the stub process, the FIM-sized request, statistics."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import statistics
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported when used, so the stub process stays light
    from anyfill.config.model import BackendConfig, Limits
    from anyfill.daemon.completion import CompletionRequest, Priority
    from anyfill.daemon.context import Context

#: A FIM-sized request: about 1.5 kB of code before the caret and 0.5 kB after it.
PREFIX = ("def add(a, b):\n    return a + b\n\n" * 48)[:1500] + "def mul(a, b):\n"
SUFFIX = ("\n\nprint(mul(2, 3))\n" * 30)[:500]
MODEL = "qwen2.5-coder-1.5b"
MAX_TOKENS = 64

Say = Callable[[str], None]
"""Where a benchmark reports progress (the CLI passes ``click.echo``)."""


def quiet(_: str) -> None:
    return None


def openai_body(stream: bool = True) -> dict[str, Any]:
    """What the raw clients send: the same templated prompt anyfill sends for this model."""
    return {
        "model": MODEL,
        "prompt": f"<|fim_prefix|>{PREFIX}<|fim_suffix|>{SUFFIX}<|fim_middle|>",
        "max_tokens": MAX_TOKENS,
        "temperature": 0.1,
        "stream": stream,
        "stop": ["<|endoftext|>", "<|fim_prefix|>"],
    }


def stub_config(url: str, limits: Limits | None = None) -> BackendConfig:
    """The openai-completions backend every benchmark points at the stub."""
    from anyfill.config.model import BackendConfig, Limits

    return BackendConfig(
        name="stub",
        type="openai-completions",
        url=url,
        model=MODEL,
        max_tokens=MAX_TOKENS,
        limits=limits or Limits(),
    )


def fim_request(request_id: str, app: str, priority: Priority = "interactive") -> CompletionRequest:
    """A request for the FIM-sized context; ``app`` is its target (one per concurrent worker,
    or a newer request supersedes it)."""
    request_type, context_type = _request_types()
    return request_type(
        context=context_type(prefix=PREFIX, suffix=SUFFIX, app=app),
        id=request_id,
        priority=priority,
    )


@functools.cache
def _request_types() -> tuple[type[CompletionRequest], type[Context]]:
    """Imported once, when first used: an import statement per request would be counted
    as anyfill's cost by P2, and the stub process never needs them."""
    from anyfill.daemon.completion import CompletionRequest
    from anyfill.daemon.context import Context

    return CompletionRequest, Context


def sse_text(line: str) -> str:
    """The text of one ``data: {...}`` line of an OpenAI completions stream."""
    if not line.startswith("data: ") or line == "data: [DONE]":
        return ""
    choices = json.loads(line[6:]).get("choices") or ()
    return "".join(choice.get("text") or "" for choice in choices)


@dataclass
class Stub:
    url: str
    process: subprocess.Popen[str]

    def stats(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.url}/_stats", timeout=10) as answer:
            data: dict[str, Any] = json.loads(answer.read())
        return data

    def reset(self) -> None:
        request = urllib.request.Request(f"{self.url}/_reset", data=b"", method="POST")
        with urllib.request.urlopen(request, timeout=10) as answer:
            answer.read()


@contextlib.contextmanager
def stub(*args: str) -> Iterator[Stub]:
    """Run the stub server in its own process for the duration of the block."""
    process = subprocess.Popen(
        [sys.executable, "-m", "anyfill.bench.stub", *args],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline().strip())
        yield Stub(f"http://127.0.0.1:{port}", process)
    finally:
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(5)
        if process.poll() is None:
            process.kill()


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def quantile(values: Sequence[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def machine() -> str:
    """The conditions a figure was measured under: cores and load."""
    load = os.getloadavg()
    return (
        f"{os.cpu_count()} cores, load average {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}, "
        f"Python {sys.version.split()[0]}"
    )
