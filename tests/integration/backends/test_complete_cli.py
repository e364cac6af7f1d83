"""``anyfill complete`` as a real subprocess against loopback protocol servers."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.servers import LlamaCpp, Ollama, OpenAI, RecordedRequest, Reply, Response
from tests.servers.fixtures import StartServer

SEED_DOC = 'print("Hel<|cursor|>)\n'


@dataclass
class Run:
    code: int
    out: str
    err: str


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    environ = {
        k: v for k, v in os.environ.items() if not k.startswith("ANYFILL_") and "API_KEY" not in k
    }
    environ["ANYFILL_CONFIG"] = str(tmp_path / "absent.toml")
    environ["PYTHON_KEYRING_BACKEND"] = "keyring.backends.null.Keyring"
    return environ


async def anyfill(
    env: dict[str, str],
    *args: str,
    stdin: str = "",
    cwd: Path | None = None,
    timeout: float = 60,  # noqa: ASYNC109
) -> Run:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "anyfill.daemon.cli",
        "complete",
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=cwd,
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin.encode()), timeout)
    assert proc.returncode is not None
    return Run(proc.returncode, out.decode(), err.decode())


async def test_document_file_prints_only_the_middle(
    loopback: StartServer, env: dict[str, str], tmp_path: Path
) -> None:
    srv = await loopback(LlamaCpp())
    doc = tmp_path / "hello.py"
    doc.write_text(SEED_DOC)
    run = await anyfill(env, str(doc), "--type", "llamacpp", "--url", srv.url)
    assert run.code == 0, run.err
    assert run.out == 'lo World"'
    body = srv.requests[0].json()
    assert body["input_prefix"] == 'print("Hel'
    assert body["input_suffix"] == ")\n"


async def test_stdin_with_own_marker_through_a_chat_backend(
    loopback: StartServer, env: dict[str, str]
) -> None:
    srv = await loopback(OpenAI(api_key="k-123"))
    env["MY_KEY"] = "k-123"
    run = await anyfill(
        env,
        "-",
        "--marker",
        "@@",
        "--type",
        "openai-chat",
        "--url",
        srv.url,
        "--model",
        "gpt-test",
        "--api-key-env",
        "MY_KEY",
        "--max-tokens",
        "9",
        stdin='print("Hel@@)',
    )
    assert run.code == 0, run.err
    assert run.out == 'lo World"'
    request = srv.requests[0]
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer k-123"
    assert request.json()["max_tokens"] == 9


async def test_prefix_and_suffix_files_with_json_output(
    loopback: StartServer, env: dict[str, str], tmp_path: Path
) -> None:
    srv = await loopback(Ollama(models={"starcoder2:3b": "{{ .Prompt }}"}))
    (tmp_path / "p.txt").write_text('print("Hel')
    (tmp_path / "s.txt").write_text(")")
    run = await anyfill(
        env,
        "--prefix-file",
        str(tmp_path / "p.txt"),
        "--suffix-file",
        str(tmp_path / "s.txt"),
        "--type",
        "ollama",
        "--url",
        srv.url,
        "--model",
        "starcoder2:3b",
        "--json",
    )
    assert run.code == 0, run.err
    info = json.loads(run.out)
    assert info["middle"] == 'lo World"'
    assert info["raw"] == 'lo World")'
    assert info["backend"] == "ollama"
    assert info["mode"] == "template"
    assert info["template"] == "starcoder"
    assert "lacks .Suffix" in info["note"]
    assert info["ms"] > 0
    assert info["usage"]["prompt_tokens"] == 7


async def test_configured_backend_by_name(
    loopback: StartServer, env: dict[str, str], tmp_path: Path
) -> None:
    srv = await loopback(LlamaCpp())
    config = tmp_path / "anyfill.toml"
    config.write_text(
        f'[[backends]]\nname = "box"\ntype = "llamacpp"\nurl = "{srv.url}"\n'
        '[routing]\ndefault = ["box"]\n'
    )
    env["ANYFILL_CONFIG"] = str(config)
    run = await anyfill(env, "--backend", "box", "-", stdin=SEED_DOC)
    assert run.code == 0, run.err
    assert run.out == 'lo World"'
    unknown = await anyfill(env, "--backend", "nope", "-", stdin=SEED_DOC)
    assert unknown.code == 2
    assert "no enabled backend named 'nope' (configured: box)" in unknown.err


class FailsOnBoom(Ollama):
    """Answers a 500 for the prompt ``boom`` (one line's backend request fails)."""

    async def __call__(self, request: RecordedRequest, response: Response) -> None:
        if request.path == "/api/generate" and (request.json() or {}).get("prompt") == "boom":
            await response.json(500, {"error": "kaput"})
            return
        await super().__call__(request, response)


OLLAMA = ["--type", "ollama", "--model", "qwen2.5-coder:1.5b-base"]


async def test_jsonl_batch_keeps_order_and_reports_each_failure(
    loopback: StartServer, env: dict[str, str], tmp_path: Path
) -> None:
    srv = await loopback(FailsOnBoom(default=Reply(text='lo World")', chunk_delay_s=0.01)))
    lines = [
        json.dumps({"id": "a", "prefix": 'print("Hel', "suffix": ")"}),
        "{this is not json",
        json.dumps({"id": "b", "prefix": "boom", "suffix": ""}),
        "",
        json.dumps({"id": 7, "prefix": 'print("Hel', "suffix": ")"}),
        json.dumps({"id": "c", "prefix": 3}),
    ]
    batch = tmp_path / "in.jsonl"
    batch.write_text("\n".join(lines) + "\n")
    run = await anyfill(env, "--jsonl", str(batch), *OLLAMA, "--url", srv.url)
    assert run.code == 1
    results = [json.loads(line) for line in run.out.splitlines()]
    # The user's ids are kept (none for a line that is not JSON); "line" says which line.
    assert [r["id"] for r in results] == ["a", None, "b", 7, "c"]
    assert [r["line"] for r in results] == [1, 2, 3, 5, 6]
    assert results[0] == {
        "id": "a",
        "line": 1,
        "middle": 'lo World"',
        "backend": "ollama",
        "ms": results[0]["ms"],
        "error": None,
    }
    assert results[0]["ms"] > 0
    assert results[1]["error"].startswith("line 2: not JSON")
    assert results[1]["middle"] is None
    assert "backend 'ollama' failed with HTTP 500" in results[2]["error"]
    assert "kaput" not in results[2]["error"]  # the server's words are captured text
    assert "5 characters, is hidden" in results[2]["error"]
    assert results[2]["middle"] is None
    assert results[3]["middle"] == 'lo World"'
    assert "must be strings" in results[4]["error"]
    prompts = sorted(r.json()["prompt"] for r in srv.requests if r.path == "/api/generate")
    assert prompts[0] == "boom"
    assert len(prompts) >= 2  # the two identical lines may share one answer (cache)


async def test_jsonl_requests_run_concurrently(loopback: StartServer, env: dict[str, str]) -> None:
    srv = await loopback(Ollama(default=Reply(text="x", delay_s=0.3)))
    lines = "".join(json.dumps({"id": i, "prefix": f"a{i}", "suffix": ""}) + "\n" for i in range(4))
    run = await anyfill(env, "--jsonl", "-", *OLLAMA, "--url", srv.url, stdin=lines)
    assert run.code == 0, run.err
    assert [json.loads(line)["id"] for line in run.out.splitlines()] == [0, 1, 2, 3]
    starts = sorted(r.at for r in srv.requests if r.path == "/api/generate")
    assert len(starts) == 4
    # Ad-hoc backends allow 2 at once: the second request starts before the first ends.
    assert starts[1] - starts[0] < 0.25


async def test_jsonl_on_a_prompt_list_server_goes_as_one_batch(
    loopback: StartServer, env: dict[str, str]
) -> None:
    srv = await loopback(LlamaCpp(default=Reply(text="x = 1")))
    lines = "".join(
        json.dumps({"id": i, "prefix": f"v{i} = ", "suffix": "\n"}) + "\n" for i in range(3)
    )
    run = await anyfill(env, "--jsonl", "-", "--type", "llamacpp", "--url", srv.url, stdin=lines)
    assert run.code == 0, run.err
    results = [json.loads(line) for line in run.out.splitlines()]
    assert [r["middle"] for r in results] == ["x = 1"] * 3
    batches = [r.json()["prompt"] for r in srv.requests if r.path == "/v1/completions"]
    assert sum(len(prompts) for prompts in batches) == 3
    assert len(batches) < 3


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        (["--type", "gpt", "--url", "http://127.0.0.1:1"], SEED_DOC, "choose one of: llamacpp"),
        (["--type", "llamacpp", "--url", "not a url"], SEED_DOC, "is not an http(s) URL"),
        (["--type", "llamacpp"], SEED_DOC, "needs both --type and --url"),
        (
            ["--type", "anthropic", "--url", "http://127.0.0.1:1"],
            SEED_DOC,
            "needs an API key: set the environment variable ANTHROPIC_API_KEY",
        ),
        (["--type", "llamacpp", "--url", "http://127.0.0.1:1"], "no marker\n", "no cursor marker"),
        (
            ["--type", "llamacpp", "--url", "http://127.0.0.1:1"],
            "a<|cursor|>b<|cursor|>",
            "2 cursor markers",
        ),
        (
            ["--jsonl", "-", "--prefix-file", "x", "--type", "llamacpp", "--url", "http://h"],
            "",
            "give one input",
        ),
        (["--type", "llamacpp", "--url", "http://h", "/no/such/file.py"], "", "no such file"),
    ],
    ids=[
        "unknown-type",
        "bad-url",
        "no-url",
        "missing-key",
        "no-marker",
        "two-markers",
        "two-inputs",
        "no-file",
    ],
)
async def test_usage_errors_exit_2(
    env: dict[str, str], args: list[str], stdin: str, message: str
) -> None:
    if "-" not in args and "/no/such/file.py" not in args:
        args = ["-", *args]
    run = await anyfill(env, *args, stdin=stdin)
    assert run.code == 2, run
    assert message in run.err
    assert run.out == ""
    assert "Traceback" not in run.err


async def test_backend_failure_exits_1_with_one_line(env: dict[str, str], refused_url: str) -> None:
    run = await anyfill(env, "-", "--type", "llamacpp", "--url", refused_url, stdin=SEED_DOC)
    assert run.code == 1
    assert run.err.strip() == (
        f"anyfill: error: backend 'llamacpp': nothing listens on {refused_url}; "
        "start the server or fix the backend's url"
    )


async def test_configured_backend_without_its_key(env: dict[str, str], tmp_path: Path) -> None:
    config = tmp_path / "anyfill.toml"
    config.write_text(
        '[[backends]]\nname = "claude"\ntype = "anthropic"\nurl = "http://127.0.0.1:9"\n'
        '[routing]\ndefault = ["claude"]\n'
    )
    env["ANYFILL_CONFIG"] = str(config)
    run = await anyfill(env, "-", stdin=SEED_DOC)
    assert run.code == 2
    assert "backend 'claude' needs an API key" in run.err
    assert "anyfill config set-key claude" in run.err
    assert "ANTHROPIC_API_KEY" in run.err


async def test_crlf_document_is_read_and_answered_byte_for_byte(
    loopback: StartServer, env: dict[str, str], tmp_path: Path
) -> None:
    srv = await loopback(LlamaCpp(default=Reply(text="    x = 1\r\n    y = 2")))
    doc = tmp_path / "win.py"
    doc.write_bytes(b"def f():\r\n<|cursor|>\r\n\r\nf()\r\n")
    run = await anyfill(env, str(doc), "--type", "llamacpp", "--url", srv.url)
    assert run.code == 0, run.err
    body = srv.requests[0].json()
    assert body["input_prefix"] == "def f():\r\n"
    assert body["input_suffix"] == "\r\n\r\nf()\r\n"
    assert "\r\n" in run.out
    assert "\r\r" not in run.out


async def test_jsonl_strings_may_hold_line_separators(
    loopback: StartServer, env: dict[str, str]
) -> None:
    srv = await loopback(Ollama())
    line = json.dumps({"id": 1, "prefix": "a\u2028b = ", "suffix": ""}, ensure_ascii=False)
    run = await anyfill(env, "--jsonl", "-", *OLLAMA, "--url", srv.url, stdin=line + "\r\n")
    assert run.code == 0, run.out
    assert json.loads(run.out)["error"] is None
    assert srv.requests[-1].json()["prompt"] == "a\u2028b = "


async def test_non_utf8_document_is_a_usage_error(env: dict[str, str], tmp_path: Path) -> None:
    doc = tmp_path / "latin1.txt"
    doc.write_bytes("caf\xe9 <|cursor|>".encode("latin-1"))
    run = await anyfill(env, str(doc), "--type", "llamacpp", "--url", "http://127.0.0.1:9")
    assert run.code == 2
    assert "is not UTF-8 text" in run.err


async def test_jsonl_detects_the_template_once_even_when_none_fits(
    loopback: StartServer, env: dict[str, str]
) -> None:
    # /infill works but neither the model's name nor its tokens name a FIM family: the batch
    # goes one by one, and that answer is remembered instead of probed for every small batch.
    srv = await loopback(
        LlamaCpp(default=Reply(text="x = 1"), model_path="/m/mystery.gguf", vocab=("<|im_end|>",))
    )
    lines = "".join(
        json.dumps({"id": i, "prefix": f"v{i} = ", "suffix": "\n"}) + "\n" for i in range(40)
    )
    run = await anyfill(env, "--jsonl", "-", "--type", "llamacpp", "--url", srv.url, stdin=lines)
    assert run.code == 0, run.err
    assert [json.loads(line)["middle"] for line in run.out.splitlines()] == ["x = 1"] * 40
    paths = [r.path for r in srv.requests]
    assert paths.count("/infill") == 40
    assert paths.count("/props") == 1
    assert paths.count("/tokenize") <= 12  # one round of probe spellings


@pytest.mark.parametrize("ident", ["1e999", "-1e999", "[1e400]", '{"a": 1e999}'])
async def test_jsonl_id_too_large_for_a_float_is_a_bad_line(
    loopback: StartServer, env: dict[str, str], ident: str
) -> None:
    srv = await loopback(LlamaCpp(default=Reply(text="x = 1")))
    lines = (
        '{"id": 1, "prefix": "a = ", "suffix": "\\n"}\n'
        f'{{"id": {ident}, "prefix": "b = ", "suffix": "\\n"}}\n'
        '{"id": 3, "prefix": "c = ", "suffix": "\\n"}\n'
    )
    run = await anyfill(env, "--jsonl", "-", "--type", "llamacpp", "--url", srv.url, stdin=lines)
    assert run.code == 1, run.err
    assert "Traceback" not in run.err
    assert "internal error" not in run.err.lower()
    results = [json.loads(line) for line in run.out.splitlines()]
    assert [r["line"] for r in results] == [1, 2, 3]
    assert results[0]["middle"] == "x = 1"
    assert results[2]["middle"] == "x = 1"
    assert results[1]["id"] is None
    assert results[1]["middle"] is None
    assert "too large" in results[1]["error"]
