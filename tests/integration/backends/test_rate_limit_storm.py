"""``anyfill complete --jsonl`` against a loopback llama-server that answers 429 to every
request (issue 24): each line is told "rate limited" and the batch goes on, with a bounded
number of requests per line and a bounded request rate, whether the server says
``Retry-After: 0`` or nothing at all. A server that stops rate limiting is used again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.backends.test_complete_cli import anyfill, env
from tests.servers import LlamaCpp, Reply
from tests.servers.fixtures import StartServer

__all__ = ["env"]

COMPLETIONS = {"/infill", "/completion", "/v1/completions"}
LINES = 3
#: Requests a rate-limited line makes at most before it gives up (README, `--jsonl`).
RATE_LIMIT_TRIES = 4


def config(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "anyfill.toml"
    path.write_text(
        f'[[backends]]\nname = "local"\ntype = "llamacpp"\nurl = "{url}"\n'
        '[routing]\ndefault = ["local"]\n'
    )
    return path


def batch(lines: int) -> str:
    return "".join(
        json.dumps({"id": i, "prefix": f"v{i} = ", "suffix": "\n"}) + "\n" for i in range(lines)
    )


@pytest.mark.parametrize("retry_after", ["0", None], ids=["retry-after-0", "no-retry-after"])
async def test_a_server_that_answers_only_429_costs_a_bounded_wait_and_few_requests(
    loopback: StartServer, env: dict[str, str], tmp_path: Path, retry_after: str | None
) -> None:
    server = await loopback(LlamaCpp(default=Reply(error="rate_limit", retry_after=retry_after)))
    env["ANYFILL_CONFIG"] = str(config(tmp_path, server.url))
    # Before: 120 s a line (360 s here), or ~12 requests a second with Retry-After: 0.
    run = await anyfill(env, "--jsonl", "-", stdin=batch(LINES), timeout=120)
    results = [json.loads(line) for line in run.out.splitlines()]
    assert [r["id"] for r in results] == list(range(LINES)), run.err[-2000:]
    for result in results:
        assert result["middle"] is None
        assert result["error"].startswith("rate limited"), result
        assert "went on to the next line" in result["error"]
    assert "Traceback" not in run.err
    asked = [r for r in server.requests if r.path in COMPLETIONS]
    # The first line tries a few times; once it gave up, each next line at most once.
    assert len(asked) <= RATE_LIMIT_TRIES + LINES - 1, len(asked)
    assert run.code != 0


async def test_a_server_that_stops_rate_limiting_answers_every_line(
    loopback: StartServer, env: dict[str, str], tmp_path: Path
) -> None:
    limited = Reply(error="rate_limit", retry_after="0")
    server = await loopback(LlamaCpp(limited, limited, default=Reply(text="1")))
    env["ANYFILL_CONFIG"] = str(config(tmp_path, server.url))
    run = await anyfill(env, "--jsonl", "-", stdin=batch(LINES), timeout=120)
    results = [json.loads(line) for line in run.out.splitlines()]
    assert [r["middle"] for r in results] == ["1"] * LINES, results
    assert run.code == 0
