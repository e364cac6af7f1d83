"""``anyfill eval`` end to end through the real llama-server and the tiny FIM model
(tests/llm/server.py). Its random weights score nothing; what counts is the plumbing: every
problem asked and answered through the engine, scored, tested in the sandbox, written."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.llm.server import SKIP_REASON, TINY_FIM_MODEL, LlamaServer, find_assets

ASSETS = find_assets()
pytestmark = [
    pytest.mark.llamacpp,
    pytest.mark.skipif(ASSETS is None, reason=SKIP_REASON),
]


@pytest.fixture(scope="module")
def tiny() -> Iterator[LlamaServer]:
    assert ASSETS is not None
    # 2048 tokens per slot: the longest HumanEval prefix and suffix fit. LlamaServer runs
    # one thread (its default threads made one /infill take 8.5 s at load 11, not 20 ms).
    with LlamaServer(Path(ASSETS) / TINY_FIM_MODEL, ctx_size=4096) as server:
        yield server


def test_the_tiny_model_runs_end_to_end(tiny: LlamaServer, tmp_path: Path) -> None:
    config = tmp_path / "anyfill.toml"
    config.write_text(
        f'[[backends]]\nname = "tiny"\ntype = "llamacpp"\nurl = "{tiny.url}"\n'
        "temperature = 0.0\n"
        '[routing]\ndefault = ["tiny"]\n[logging]\nfile = false\n'
    )
    out = tmp_path / "out"
    args = ["--limit", "24", "--execute", "--max-tokens", "16", "--json", "--out", str(out)]
    run = subprocess.run(
        [sys.executable, "-m", "anyfill.daemon.cli", "eval", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={
            "ANYFILL_CONFIG": str(config),
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp_path),
            "PYTHON_KEYRING_BACKEND": "keyring.backends.null.Keyring",
        },
    )
    assert run.returncode == 0, run.stderr + tiny.log_tail()
    (row,) = json.loads(run.stdout)["backends"]
    assert (row["problems"], row["answered"], row["failed"]) == (24, 24, 0)
    assert row["executed"] == 24
    assert row["tokens"]["prompt"] > 24 * 50  # the real prompts were tokenised
    assert 0 < row["tokens"]["completion"] <= 24 * 16
    assert row["latency_ms"]["p50"] > 0
    lines = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(lines) == 24
    assert all(isinstance(line["middle"], str) and line["mode"] for line in lines)
    assert all(line["outcome"] in {"passed", "failed", "timed out"} for line in lines)
    assert (out / "eval.png").is_file()
