"""``anyfill complete --jsonl`` against a loopback llama-server that answers 429 to every
request (issue 24): each line is told "rate limited" and the batch goes on, with a bounded
number of requests per line and a bounded request rate, whether the server says
``Retry-After: 0``, nothing at all, or a wait that does not fit in a line's 30 s. The
spacing and the per-line time are read from the server's own record of when each request
arrived (not from timing the client). A server that stops rate limiting is used again."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest

from tests.integration.backends.test_complete_cli import anyfill, env
from tests.servers import LlamaCpp, Reply
from tests.servers.fixtures import StartServer

__all__ = ["env"]

COMPLETIONS = {"/infill", "/completion", "/v1/completions"}
LINES = 3
#: The README's promise for `--jsonl` (not read from the code, which it checks): a
#: rate-limited line makes at most 4 requests and waits at most 30 s; after a 429 the next
#: request waits as long as the server asked, at least 1 s, doubling with each 429 in a row.
RATE_LIMIT_TRIES = 4
RATE_LIMIT_WAIT_S = 30.0
RATE_LIMIT_PAUSE_S = 1.0


def config(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "anyfill.toml"
    path.write_text(
        f'[[backends]]\nname = "local"\ntype = "llamacpp"\nurl = "{url}"\n'
        '[routing]\ndefault = ["local"]\n'
    )
    return path


def line_of(body: bytes) -> set[int]:
    """The input lines a request asks for (a request may carry several lines' prompts)."""
    return {int(n) for n in re.findall(r"\bv(\d+) = ", body.decode())}


def batch(lines: int) -> str:
    return "".join(
        json.dumps({"id": i, "prefix": f"v{i} = ", "suffix": "\n"}) + "\n" for i in range(lines)
    )


@pytest.mark.parametrize(
    "retry_after", ["0", None, "20"], ids=["retry-after-0", "no-retry-after", "retry-after-20"]
)
async def test_a_server_that_answers_only_429_costs_a_bounded_wait_and_few_requests(
    loopback: StartServer,
    env: dict[str, str],
    tmp_path: Path,
    retry_after: str | None,
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

    # When the requests arrived, by the server's clock: after the k-th 429 in a row the
    # next request waits at least 1 s * 2**k, and at least what the server asked for.
    asked_s = float(retry_after or 0)
    arrived = [r.at for r in asked]
    gaps = [later - earlier for earlier, later in itertools.pairwise(arrived)]
    for k, gap in enumerate(gaps):
        least = max(RATE_LIMIT_PAUSE_S * 2 ** min(k, 5), asked_s)
        assert gap >= least, (k, [round(g, 3) for g in gaps])
    # No line keeps asking for more than 30 s, however long the server asks it to wait.
    lines_asked: dict[int, list[float]] = {}
    for request in asked:
        for line in line_of(request.body):
            lines_asked.setdefault(line, []).append(request.at)
    assert set(lines_asked) <= set(range(LINES)), lines_asked
    for line, times in lines_asked.items():
        assert len(times) <= RATE_LIMIT_TRIES, (line, times)
        assert times[-1] - times[0] <= RATE_LIMIT_WAIT_S, (line, times)
    if asked_s * 2 > RATE_LIMIT_WAIT_S:
        # A third request would come 40 s after the first: the 30 s ended the wait (for
        # the line that learned it first; the other, told in the same answer, was then
        # asked at most once).
        assert len(asked) == 2, gaps
        assert any("a line waits at most 30 s" in r["error"] for r in results), results


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
