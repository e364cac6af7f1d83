"""``anyfill eval`` as a real subprocess against a loopback llama.cpp server that answers
HumanEval infilling from an answer key (tests/servers/humaneval.py)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from anyfill.daemon.evaluation.problems import Problem, load_problems
from tests.servers.fixtures import StartServer
from tests.servers.humaneval import AnswerKey, canonical, wrong
from tests.servers.llamacpp import LlamaCpp
from tests.servers.ollama import Ollama
from tests.servers.script import Reply

SINGLE_LINE = list(load_problems("single-line"))
FIRST = SINGLE_LINE[0]  # HumanEval/0: has_close_elements, L0 is its outer `for` line


@dataclass
class Run:
    code: int
    out: str
    err: str

    def json(self) -> dict[str, Any]:
        return json.loads(self.out)  # type: ignore[no-any-return]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    environ = {
        k: v for k, v in os.environ.items() if not k.startswith("ANYFILL_") and "API_KEY" not in k
    }
    environ["ANYFILL_CONFIG"] = str(tmp_path / "absent.toml")
    environ["PYTHON_KEYRING_BACKEND"] = "keyring.backends.null.Keyring"
    environ["XDG_STATE_HOME"] = str(tmp_path / "state")
    return environ


def configure(env: dict[str, str], tmp_path: Path, **backends: str) -> None:
    """A config file with these llamacpp backends (name = url), the first as the default."""
    text = "".join(
        f'[[backends]]\nname = "{name}"\ntype = "llamacpp"\nurl = "{url}"\n'
        for name, url in backends.items()
    )
    text += f'[routing]\ndefault = ["{next(iter(backends))}"]\n[logging]\nfile = false\n'
    (tmp_path / "anyfill.toml").write_text(text)
    env["ANYFILL_CONFIG"] = str(tmp_path / "anyfill.toml")


async def start_eval(env: dict[str, str], *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "anyfill.daemon.cli",
        "eval",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )


async def anyfill_eval(env: dict[str, str], *args: str, timeout: float = 240) -> Run:  # noqa: ASYNC109
    proc = await start_eval(env, *args)
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode is not None
    return Run(proc.returncode, out.decode(), err.decode())


def results(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


async def test_canonical_answers_score_full_exact_match_on_all_1033(
    loopback: StartServer, env: dict[str, str], tmp_path: Path
) -> None:
    key = AnswerKey(SINGLE_LINE, canonical)
    srv = await loopback(key)
    configure(env, tmp_path, box=srv.url)
    run = await anyfill_eval(env, "--json", "--out", str(tmp_path / "out"))
    assert run.code == 0, run.err
    report = run.json()
    assert report["suite"] == "single-line"
    assert "first non-empty line" in report["rule"]
    (box,) = report["backends"]
    assert box["backend"] == "box"
    assert (box["problems"], box["answered"], box["failed"]) == (1033, 1033, 0)
    assert box["exact_match"] == 100.0
    assert box["edit_similarity"] == 100.0
    assert box["pass_at_1"] is None  # not executed
    # Every problem asked once, through the engine's batching (prompt lists).
    assert sorted(key.asked) == sorted(p.task_id for p in SINGLE_LINE)
    assert any(
        isinstance((r.json() or {}).get("prompt"), list) and len(r.json()["prompt"]) > 1
        for r in srv.requests
        if r.path == "/v1/completions"
    )
    lines = results(tmp_path / "out")
    assert sorted(line["task_id"] for line in lines) == sorted(p.task_id for p in SINGLE_LINE)
    assert all(line["exact_match"] and line["error"] is None for line in lines)


async def test_canonical_answers_pass_their_tests(
    loopback: StartServer, env: dict[str, str], tmp_path: Path
) -> None:
    srv = await loopback(AnswerKey(SINGLE_LINE, canonical))
    configure(env, tmp_path, box=srv.url)
    run = await anyfill_eval(env, "--limit", "40", "--execute", "--out", str(tmp_path / "out"))
    assert run.code == 0, run.err
    assert "pass@1" in run.out
    row = next(line for line in run.out.splitlines() if line.startswith("box"))
    assert row.split()[1:5] == ["40/40", "100%", "100%", "100%"]  # done, EM, ES, pass@1
    lines = results(tmp_path / "out")
    assert len(lines) == 40
    assert all(line["passed"] and line["outcome"] == "passed" for line in lines)
    assert "network kept away by" in run.out


async def test_wrong_answers_score_about_zero(
    loopback: StartServer, env: dict[str, str], tmp_path: Path
) -> None:
    srv = await loopback(AnswerKey(SINGLE_LINE, wrong))
    configure(env, tmp_path, box=srv.url)
    run = await anyfill_eval(env, "--limit", "40", "--execute", "--json")
    assert run.code == 0, run.err
    (box,) = run.json()["backends"]
    assert box["answered"] == 40
    assert box["exact_match"] == 0.0
    assert box["edit_similarity"] < 50
    assert box["pass_at_1"] == 0.0
    assert box["executed"] == 40


def answer_first_with(line: str) -> Any:
    def answer(problem: Problem) -> str:
        return line if problem.task_id == FIRST.task_id else problem.canonical_solution

    return answer


async def test_a_test_that_loops_forever_is_killed_at_the_limit(
    loopback: StartServer, env: dict[str, str], tmp_path: Path
) -> None:
    # iter(int, 1) never ends: the outer loop of has_close_elements runs forever.
    forever = "    for idx, elem in enumerate(iter(int, 1)):\n"
    srv = await loopback(AnswerKey(SINGLE_LINE, answer_first_with(forever)))
    configure(env, tmp_path, box=srv.url)
    out = tmp_path / "out"
    # 5 s, not 1: the two good programs must finish within it on a loaded 2-core machine.
    run = await anyfill_eval(
        env, "--limit", "3", "--execute", "--time-limit", "5", "--out", str(out), timeout=120
    )
    assert run.code == 0, run.err
    by_id = {line["task_id"]: line for line in results(out)}
    assert by_id[FIRST.task_id]["outcome"] == "timed out"
    assert by_id[FIRST.task_id]["detail"] == "killed after 5 s"
    assert by_id[FIRST.task_id]["passed"] is False
    assert by_id[FIRST.task_id]["exact_match"] is False
    others = [line for task, line in by_id.items() if task != FIRST.task_id]
    assert [line["outcome"] for line in others] == ["passed", "passed"]


async def test_a_test_that_reaches_for_the_network_fails(
    loopback: StartServer, env: dict[str, str], tmp_path: Path
) -> None:
    connections = 0

    async def count(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        writer.close()

    listener = await asyncio.start_server(count, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    # With the network reachable this line connects, gets a true socket and passes.
    reach = (
        "    for idx, elem in enumerate(numbers if __import__('socket')"
        f".create_connection(('127.0.0.1', {port})) else []):\n"
    )
    srv = await loopback(AnswerKey(SINGLE_LINE, answer_first_with(reach)))
    configure(env, tmp_path, box=srv.url)
    out = tmp_path / "out"
    try:
        run = await anyfill_eval(env, "--limit", "1", "--execute", "--out", str(out))
    finally:
        listener.close()
        await listener.wait_closed()
    assert run.code == 0, run.err
    (line,) = results(out)
    assert line["outcome"] == "failed"
    assert "not allowed" in line["detail"] or "unreachable" in line["detail"]
    assert connections == 0


async def test_backends_side_by_side_json_table_and_plot(
    loopback: StartServer, env: dict[str, str], tmp_path: Path
) -> None:
    right = await loopback(AnswerKey(SINGLE_LINE, canonical))
    bad = await loopback(AnswerKey(SINGLE_LINE, wrong))
    configure(env, tmp_path, right=right.url, bad=bad.url)
    out = tmp_path / "out"
    args = ("--backend", "right", "--backend", "bad", "--limit", "12", "--out", str(out))
    run = await anyfill_eval(env, *args, "--json")
    assert run.code == 0, run.err
    report = run.json()
    assert set(report) == {
        "suite",
        "rule",
        "problems",
        "stopped",
        "execute",
        "backends",
        "references",
        "files",
    }
    assert report["problems"] == 12
    assert report["stopped"] is False
    assert report["execute"] is None
    assert [b["backend"] for b in report["backends"]] == ["right", "bad"]
    assert [b["exact_match"] for b in report["backends"]] == [100.0, 0.0]
    right_row = report["backends"][0]
    assert set(right_row) == {
        "backend",
        "problems",
        "finished",
        "answered",
        "failed",
        "exact_match",
        "edit_similarity",
        "pass_at_1",
        "executed",
        "latency_ms",
        "tokens",
        "wall_s",
        "skipped",
    }
    assert right_row["latency_ms"]["p50"] > 0
    assert right_row["latency_ms"]["p95"] >= right_row["latency_ms"]["p50"]
    assert right_row["tokens"]["completion"] > 0
    assert {r["model"]: r["score"] for r in report["references"]["exact_match"]} == {
        "Qwen2.5-Coder-0.5B base": 70.3,
        "Qwen2.5-Coder-1.5B base": 77.0,
        "StarCoder2-3B": 70.9,
        "DeepSeek-Coder-1.3B base": 72.8,
    }
    assert report["files"]["plot"] == str(out / "eval.png")
    assert (out / "eval.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((out / "summary.json").read_text())["backends"] == report["backends"]
    lines = results(out)
    assert sorted({line["backend"] for line in lines}) == ["bad", "right"]
    assert len(lines) == 24

    table = await anyfill_eval(env, *args)
    assert table.code == 0, table.err
    rows = [line.split()[0] for line in table.out.splitlines()[1:5]]
    assert rows[0] == "backend"
    assert rows[2:] == ["right", "bad"]
    assert "Qwen2.5-Coder-1.5B base    77.0%" in table.out
    assert "rule: exact match: the first non-empty line of the middle, stripped" in table.out
    assert table.err == ""  # no progress bar when stderr is not a terminal


async def test_ctrl_c_keeps_what_finished(
    loopback: StartServer, env: dict[str, str], tmp_path: Path
) -> None:
    srv = await loopback(AnswerKey(SINGLE_LINE, canonical, delay_s=0.3))
    configure(env, tmp_path, box=srv.url)
    out = tmp_path / "out"
    proc = await start_eval(env, "--json", "--out", str(out))
    jsonl = out / "results.jsonl"

    def finished() -> int:
        return len(jsonl.read_text().splitlines()) if jsonl.exists() else 0

    for _ in range(1200):  # the results file is the only sign of progress: poll it
        if finished() >= 3:
            break
        await asyncio.sleep(0.05)
    else:
        pytest.fail("no result within 60 s")
    proc.send_signal(signal.SIGINT)
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 130, stderr.decode()
    assert "stopping: the finished problems are kept" in stderr.decode()
    report = json.loads(stdout)
    assert report["stopped"] is True
    (box,) = report["backends"]
    kept = results(out)
    assert 3 <= box["finished"] < 1033
    assert box["finished"] == len(kept) == box["answered"]
    assert box["exact_match"] == 100.0
    assert json.loads((out / "summary.json").read_text())["stopped"] is True


async def test_unknown_backend_is_a_usage_error(
    loopback: StartServer, env: dict[str, str], tmp_path: Path
) -> None:
    srv = await loopback(AnswerKey(SINGLE_LINE))
    configure(env, tmp_path, box=srv.url)
    run = await anyfill_eval(env, "--backend", "nope")
    assert run.code == 2
    assert "no enabled backend named 'nope' (configured: box)" in run.err
    assert srv.requests == []


async def test_every_problem_is_asked_of_the_backend_not_of_the_cache(
    loopback: StartServer, env: dict[str, str], tmp_path: Path
) -> None:
    """The multi-line holes of one task share their suffix, and a longer hole's prefix is a
    shorter one's plus its first lines: the press's type-through cache would answer them
    from each other. The eval asks the backend every time."""
    problems = list(load_problems("multi-line", 40))
    key = AnswerKey(problems, canonical)
    srv = await loopback(key)
    configure(env, tmp_path, box=srv.url)
    run = await anyfill_eval(env, "--suite", "multi-line", "--limit", "40", "--json")
    assert run.code == 0, run.err
    (box,) = run.json()["backends"]
    assert box["answered"] == 40
    assert sorted(key.asked) == sorted(p.task_id for p in problems)


async def test_a_backend_that_starts_rate_limiting_is_paced_for_all_problems(
    loopback: StartServer, env: dict[str, str], tmp_path: Path
) -> None:
    """After the first answer every answer is a 429: the problems share one pacer (as
    --jsonl lines do), so once one gave up the rest are not each waited out."""
    srv = await loopback(
        LlamaCpp(Reply(text="    pass\n"), default=Reply(error="rate_limit", retry_after="1"))
    )
    configure(env, tmp_path, box=srv.url)
    out = tmp_path / "out"
    run = await anyfill_eval(env, "--limit", "6", "--json", "--out", str(out), timeout=120)
    assert run.code == 0, run.err
    (box,) = run.json()["backends"]
    assert (box["finished"], box["answered"], box["failed"]) == (6, 1, 5)
    assert box["skipped"] is None
    errors = [line["error"] for line in results(out) if line["error"]]
    assert len(errors) == 5
    assert all(error.startswith("rate limited") for error in errors)
    completions = [r for r in srv.requests if r.path in ("/v1/completions", "/infill")]
    assert len(completions) <= 1 + 4 + 4  # the answer, one problem's tries, then one each


async def test_a_backend_that_fails_its_first_problem_is_not_asked_the_rest(
    env: dict[str, str], tmp_path: Path, refused_url: str
) -> None:
    configure(env, tmp_path, box=refused_url)
    run = await anyfill_eval(env, "--json", timeout=120)
    assert run.code == 1, run.err  # nothing answered
    (box,) = run.json()["backends"]
    assert (box["problems"], box["finished"], box["failed"]) == (1033, 1, 1)
    assert "nothing listens on" in box["skipped"]
    table = await anyfill_eval(env, "--limit", "3", timeout=120)
    assert "box: failed its first problem, the others were not asked" in table.out


async def test_a_backend_without_prompt_lists_is_asked_one_problem_at_a_time(
    loopback: StartServer, env: dict[str, str], tmp_path: Path
) -> None:
    """Ollama takes one prompt per request: each problem is its own /api/generate, with the
    model's template, and the same answer for all scores only where it is right."""
    first_line = FIRST.canonical_solution
    srv = await loopback(Ollama(default=Reply(text=first_line)))
    (tmp_path / "anyfill.toml").write_text(
        f'[[backends]]\nname = "olla"\ntype = "ollama"\nurl = "{srv.url}"\n'
        'model = "qwen2.5-coder:1.5b-base"\n'
        '[routing]\ndefault = ["olla"]\n[logging]\nfile = false\n'
    )
    env["ANYFILL_CONFIG"] = str(tmp_path / "anyfill.toml")
    out = tmp_path / "out"
    run = await anyfill_eval(env, "--limit", "8", "--json", "--out", str(out))
    assert run.code == 0, run.err
    (box,) = run.json()["backends"]
    assert box["answered"] == 8
    assert box["exact_match"] == 12.5  # right for the first problem only
    generates = [r for r in srv.requests if r.path == "/api/generate"]
    assert len(generates) == 8
    assert {line["task_id"] for line in results(out) if line["exact_match"]} == {FIRST.task_id}
