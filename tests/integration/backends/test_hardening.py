"""Hostile servers and inputs (issue 9): each answer maps to our error tree with a message
that says what happened, and the exact middle holds on every path."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.backends.test_complete_cli import anyfill
from tests.servers import LlamaCpp, RecordedRequest, Reply, Response
from tests.servers.fixtures import StartServer

DOC = 'print("Hel<|cursor|>)\n'


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    environ = {
        k: v for k, v in os.environ.items() if not k.startswith("ANYFILL_") and "API_KEY" not in k
    }
    environ["ANYFILL_CONFIG"] = str(tmp_path / "absent.toml")
    environ["PYTHON_KEYRING_BACKEND"] = "keyring.backends.null.Keyring"
    return environ


class Fixed:
    """Answers every POST with one canned raw response."""

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status, self.headers, self.body_bytes = status, headers, body

    async def __call__(self, request: RecordedRequest, response: Response) -> None:
        await response.body(self.status, self.body_bytes, self.headers)


async def run_doc(env: dict[str, str], url: str) -> tuple[int, str]:
    run = await anyfill(env, "-", "--type", "llamacpp", "--url", url, stdin=DOC)
    return run.code, run.err


@pytest.mark.parametrize(
    ("status", "headers", "body", "says"),
    [
        (301, {"Location": "http://127.0.0.1:9/infill"}, b"", "redirect to http://127.0.0.1:9"),
        (200, {"Content-Type": "text/html"}, b"<html>hi</html>", "HTML page"),
        (
            200,
            {"Content-Type": "text/event-stream", "Content-Encoding": "gzip"},
            b"data: not gzip at all\n\n",
            "Content-Encoding (gzip) cannot decode",
        ),
        (
            200,
            {"Content-Type": "text/event-stream"},
            b'data: {"content": "caf\xc3", "stop": false}\n\n',
            "not valid UTF-8",
        ),
    ],
)
async def test_a_hostile_answer_is_named_not_a_traceback(
    loopback: StartServer,
    env: dict[str, str],
    status: int,
    headers: dict[str, str],
    body: bytes,
    says: str,
) -> None:
    srv = await loopback(Fixed(status, headers, body))
    code, err = await run_doc(env, srv.url)
    assert code == 1
    assert "Traceback" not in err
    assert "internal error" not in err
    assert says in err, err


async def test_gzip_that_is_gzip_still_works(loopback: StartServer, env: dict[str, str]) -> None:
    payload = (
        b'data: {"content": "lo World\\"", "stop": false}\n\n'
        b'data: {"content": "", "stop": true}\n\n'
    )
    srv = await loopback(
        Fixed(
            200,
            {"Content-Type": "text/event-stream", "Content-Encoding": "gzip"},
            gzip.compress(payload),
        )
    )
    run = await anyfill(env, "-", "--type", "llamacpp", "--url", srv.url, stdin=DOC)
    assert run.code == 0, run.err
    assert run.out == 'lo World"'


async def test_props_that_is_not_an_object_is_our_error(
    loopback: StartServer, env: dict[str, str]
) -> None:
    class ListProps(LlamaCpp):
        def props(self) -> list[int]:  # type: ignore[override]
            return [1, 2]

    srv = await loopback(ListProps(fim=False))
    code, err = await run_doc(env, srv.url)
    assert code == 1
    assert "/props is not a JSON object" in err, err


async def test_port_zero_stays_in_the_message(env: dict[str, str]) -> None:
    code, err = await run_doc(env, "http://127.0.0.1:0")
    assert code == 1
    assert "http://127.0.0.1:0" in err, err


async def test_batch_one_by_one_reports_the_plan(
    loopback: StartServer, env: dict[str, str]
) -> None:
    # A model name no template knows and no single FIM token from /tokenize: the prompt
    # list cannot be templated, so each line goes to /infill on its own.
    srv = await loopback(
        LlamaCpp(default=Reply(text="x = 1"), model_path="/m/mystery.gguf", vocab=())
    )
    lines = "".join(
        json.dumps({"id": i, "prefix": f"v{i} = ", "suffix": "\n"}) + "\n" for i in range(3)
    )
    run = await anyfill(env, "--jsonl", "-", "--type", "llamacpp", "--url", srv.url, stdin=lines)
    results = [json.loads(line) for line in run.out.splitlines()]
    assert [r["error"] for r in results] == [None] * 3, results
    assert [r["middle"] for r in results] == ["x = 1"] * 3
    assert sum(r.path == "/infill" for r in srv.requests) == 3


async def test_jsonl_output_is_strict_json_and_keeps_ids(
    loopback: StartServer, env: dict[str, str]
) -> None:
    srv = await loopback(LlamaCpp(default=Reply(text="x = 1")))
    lines = "\n".join(
        [
            '{"id": NaN, "prefix": "a = ", "suffix": "\\n"}',
            '{"id": "\\ud800", "prefix": "a = ", "suffix": "\\n"}',
            '{"id": "s", "prefix": "a = \\udc00", "suffix": "\\n"}',
            '{"id": 2, "prefix": "b = ", "suffix": "\\n"}',
            "[1]",
        ]
    )
    run = await anyfill(env, "--jsonl", "-", "--type", "llamacpp", "--url", srv.url, stdin=lines)
    assert "Traceback" not in run.err
    out = run.out.splitlines()
    assert len(out) == 5, run.err

    def refuse(name: str) -> object:
        raise ValueError(name)

    results = [json.loads(line, parse_constant=refuse) for line in out]
    assert [r["line"] for r in results] == [1, 2, 3, 4, 5]
    assert results[0]["error"].startswith("line 1: not JSON")
    assert results[1]["id"] == "\ud800"  # kept, written as an escape
    assert "lone surrogate" in results[2]["error"]
    assert results[3] == {**results[3], "id": 2, "middle": "x = 1", "error": None}
    # Line 5 is not an object; no id of ours is made up that could collide with the user's.
    assert results[4]["id"] is None
    assert results[4]["error"] == "line 5: expected a JSON object"


async def test_usage_errors_carry_the_one_prefix(env: dict[str, str]) -> None:
    run = await anyfill(env, "-", "--type", "gpt", "--url", "http://127.0.0.1:1", stdin=DOC)
    assert run.code == 2
    assert "anyfill: error: unknown backend type 'gpt'" in run.err
    assert "Error:" not in run.err.replace("anyfill: error:", "")


# -- secrets and captured text ---------------------------------------------------------------

KEY = "k-live-5f3a9c0d7e1b2a4c"
PROMPT = "TOPSECRET-PROMPT-4411"


def _prompt_of(request: RecordedRequest) -> str:
    body = request.json()
    return str(body["messages"][-1]["content"])  # the user's turn: it holds the document


TRANSFORMS: dict[str, Callable[[str], str]] = {
    "verbatim": lambda text: text,
    "upper-cased": str.upper,
    "json-escaped": json.dumps,
    "split into tokens": " | ".join,
}
"""How a server may repeat the prompt in its error: no echo check can see through all."""


class Echoes:
    """A chat server whose 400 error repeats the request's prompt (transformed) and key."""

    def __init__(self, transform: Callable[[str], str]) -> None:
        self.transform = transform

    async def __call__(self, request: RecordedRequest, response: Response) -> None:
        said = self.transform(_prompt_of(request))
        message = f"bad request {said} auth={request.headers.get('authorization')}"
        await response.json(400, {"error": {"message": message, "type": "invalid_request"}})


def _leaks(text: str) -> list[str]:
    """The forms of the secret prompt and key found in ``text``."""
    forms = [KEY, PROMPT, PROMPT.upper(), json.dumps(PROMPT)[1:-1], " | ".join(PROMPT[:8])]
    return [form for form in forms if form in text]


@pytest.mark.parametrize("how", list(TRANSFORMS))
async def test_an_error_body_that_repeats_the_prompt_leaks_nothing(
    how: str, loopback: StartServer, env: dict[str, str], tmp_path: Path
) -> None:
    srv = await loopback(Echoes(TRANSFORMS[how]))
    env.update(MY_KEY=KEY, XDG_STATE_HOME=str(tmp_path / "state"))
    chat = ["--type", "openai-chat", "--url", srv.url, "--model", "m", "--api-key-env", "MY_KEY"]
    single = await anyfill(env, "-", *chat, stdin=f"{PROMPT} <|cursor|>\n")
    line = json.dumps({"id": 1, "prefix": f"{PROMPT} ", "suffix": "\n"})
    batch = await anyfill(env, "--jsonl", "-", *chat, stdin=line + "\n")
    assert single.code == 1
    # What the user needs to act on stays: our message and the API's error identifier.
    assert "backend 'openai-chat' rejected the request" in single.err
    assert "error code: 'invalid_request'" in single.err
    assert "characters, is hidden" in single.err
    assert "set privacy.log_text = true to see it" in single.err
    result = json.loads(batch.out)
    assert "rejected the request" in result["error"]
    assert "characters, is hidden" in result["error"]
    log_file = tmp_path / "state" / "anyfill" / "log" / "anyfill.log"
    logged = log_file.read_text()
    assert "line 1 failed" in logged
    for text in (single.err, batch.out, batch.err, logged):
        assert _leaks(text) == []
        assert "bad request" not in text  # none of the server's free text


@pytest.mark.parametrize("how", ["upper-cased", "split into tokens"])
async def test_the_message_shows_with_the_user_s_consent(
    how: str, loopback: StartServer, env: dict[str, str], tmp_path: Path
) -> None:
    srv = await loopback(Echoes(TRANSFORMS[how]))
    config = tmp_path / "anyfill.toml"
    config.write_text(
        "[privacy]\nlog_text = true\n[routing]\ndefault = ['chat']\n"
        f"[[backends]]\nname = 'chat'\ntype = 'openai-chat'\nurl = '{srv.url}'\nmodel = 'm'\n"
        "key_env = 'MY_KEY'\n"
    )
    env.update(MY_KEY=KEY, ANYFILL_CONFIG=str(config), XDG_STATE_HOME=str(tmp_path / "s"))
    run = await anyfill(env, "-", stdin=f"{PROMPT} <|cursor|>\n")
    line = json.dumps({"id": 1, "prefix": f"{PROMPT} ", "suffix": "\n"})
    batch = await anyfill(env, "--jsonl", "-", stdin=line + "\n")
    shown = TRANSFORMS[how](PROMPT)  # the prompt as the server repeated it
    error = json.loads(batch.out)["error"]
    logged = (tmp_path / "s" / "anyfill" / "log" / "anyfill.log").read_text()
    for text in (run.err, error):  # opted in: the server's own words
        assert "(server said: bad request" in text
        assert shown in text
    assert shown in logged
    for text in (run.err, batch.out, logged):
        assert KEY not in text  # a key never


# -- errors that tell the truth ------------------------------------------------------------------


async def test_when_every_backend_fails_each_cause_is_told_first_choice_first(
    loopback: StartServer, env: dict[str, str], tmp_path: Path, refused_url: str
) -> None:
    srv = await loopback(LlamaCpp(fim=False, model_path="/m/mystery-chat.gguf", vocab=()))
    config = tmp_path / "anyfill.toml"
    config.write_text(
        f"[[backends]]\nname = 'llamacpp'\ntype = 'llamacpp'\nurl = '{srv.url}'\n"
        f"[[backends]]\nname = 'ollama'\ntype = 'ollama'\nurl = '{refused_url}'\nmodel = 'm'\n"
        "[routing]\ndefault = ['llamacpp', 'ollama']\n"
    )
    env["ANYFILL_CONFIG"] = str(config)
    run = await anyfill(env, "-", stdin=DOC)
    assert run.code == 1
    first = run.err.find("no FIM template fits")
    second = run.err.find("nothing listens on")
    assert 0 <= first < second, run.err


async def test_empty_marker_is_named(env: dict[str, str]) -> None:
    run = await anyfill(
        env, "-", "--marker", "", "--type", "llamacpp", "--url", "http://127.0.0.1:1"
    )
    assert run.code == 2
    assert "--marker cannot be empty" in run.err


async def test_endless_prefix_file_is_bounded(env: dict[str, str]) -> None:
    args = ["--prefix-file", "/dev/zero", "--type", "llamacpp", "--url", "http://127.0.0.1:1"]
    run = await anyfill(env, *args, timeout=30)
    assert run.code == 2
    assert "larger than 16 MiB" in run.err


class SurrogateBatches:
    """A llama-server whose prompt-list answer holds a lone surrogate escape."""

    async def __call__(self, request: RecordedRequest, response: Response) -> None:
        if request.path == "/props":
            await response.json(200, {"model_path": "/m/qwen2.5-coder-1.5b.gguf"})
            return
        batch = b'{"choices": [{"index": 0, "text": "ab\\ud800", "finish_reason": "stop"}]}'
        await response.body(200, batch, {"Content-Type": "application/json"})


async def test_a_lone_surrogate_from_the_server_is_refused(
    loopback: StartServer, env: dict[str, str]
) -> None:
    body = (
        b'data: {"content": "ab\\ud800", "stop": false}\n\ndata: {"content": "", "stop": true}\n\n'
    )
    srv = await loopback(Fixed(200, {"Content-Type": "text/event-stream"}, body))
    code, err = await run_doc(env, srv.url)
    assert code == 1
    assert "Traceback" not in err
    assert "lone surrogate" in err
    srv = await loopback(SurrogateBatches())
    line = json.dumps({"id": "x", "prefix": "a", "suffix": "b"}) + "\n"
    run = await anyfill(env, "--jsonl", "-", "--type", "llamacpp", "--url", srv.url, stdin=line)
    result = json.loads(run.out)
    assert result["middle"] is None
    assert "lone surrogate" in result["error"]


async def test_a_start_up_error_is_written_to_the_log_file(
    env: dict[str, str], tmp_path: Path
) -> None:
    for name in ("DISPLAY", "WAYLAND_DISPLAY"):
        env.pop(name, None)
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    env["XDG_RUNTIME_DIR"] = str(tmp_path)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "anyfill.daemon.cli",
        "run",
        "--headless",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode != 0
    logged = (tmp_path / "state" / "anyfill" / "log" / "anyfill.log").read_text()
    assert "could not run" in logged
    assert err.decode().count("DISPLAY") == 1  # said once on the terminal, not twice


class ResetMidStream:
    """A close-delimited event stream (no length, not chunked) reset after one event."""

    async def __call__(self, request: RecordedRequest, response: Response) -> None:
        await response.start(200, {"Content-Type": "text/event-stream"}, chunked=False)
        await response.write(b'data: {"content": "lo", "stop": false}\n\n')
        await asyncio.sleep(0.05)
        response.drop()


async def test_a_reset_mid_stream_is_called_one(loopback: StartServer, env: dict[str, str]) -> None:
    srv = await loopback(ResetMidStream())
    code, err = await run_doc(env, srv.url)
    assert code == 1
    assert "connection closed in the middle of the answer" in err, err
