"""Context beyond the caret as each backend receives it, recorded by loopback servers that
speak the backends' wire protocols: llama.cpp's ``input_extra``, a repository-level raw
template, the chat prompt, and nothing at all where the protocol has no place for it."""

from __future__ import annotations

import json
import logging
from dataclasses import replace

import pytest

from anyfill.config.model import (
    AppRule,
    BackendConfig,
    ContextConfig,
    InsertConfig,
    RoutingConfig,
    Settings,
)
from anyfill.daemon.completion import CompletionRequest
from anyfill.daemon.context import Context
from anyfill.daemon.desktop.apprules import AppSettings
from anyfill.daemon.desktop.capture.base import Captured
from anyfill.daemon.desktop.context_sources import PASSWORD_HINT
from anyfill.daemon.desktop.pipeline import Pipeline
from anyfill.daemon.desktop.ports import ClipSnapshot, Target
from anyfill.daemon.engine.engine import Engine
from tests.integration.backends.helpers import KEY
from tests.servers import LlamaCpp, MistralFim, Ollama, OpenAI, Reply
from tests.servers.fixtures import StartServer
from tests.servers.http import LoopbackServer
from tests.unit.desktop.fakes import fake_desktop
from tests.unit.desktop.test_pipeline import ReadingCapture, run

WINDOW = "Mousepad: notes.txt"
CHUNK = (f"{WINDOW} - Subject", "Launch plan for Friday")
CONTEXT = Context(prefix="The launch is ", suffix=".\n", extra=(CHUNK,), filename=WINDOW)
ENV = {"OPENAI_API_KEY": KEY, "MISTRAL_API_KEY": KEY}


async def complete(config: BackendConfig) -> str:
    settings = Settings(backends=[config], routing=RoutingConfig(default=[config.name]))
    async with Engine(settings, environ=ENV) as engine:
        done = await engine.complete(CompletionRequest(CONTEXT))
    return done.middle


async def test_llamacpp_infill_gets_the_chunks_as_input_extra(loopback: StartServer) -> None:
    srv = await loopback(LlamaCpp(Reply(text="on Friday")))
    assert await complete(BackendConfig(name="b", type="llamacpp", url=srv.url)) == "on Friday"
    body = next(r.json() for r in srv.requests if r.path == "/infill")
    assert body["input_extra"] == [{"filename": CHUNK[0], "text": CHUNK[1]}]
    assert body["input_prefix"] == "The launch is "
    assert body["input_suffix"] == ".\n"


async def test_a_raw_template_with_file_tokens_names_the_chunks(loopback: StartServer) -> None:
    # StarCoder's <file_sep>: the chunk as another file, the window as the current file.
    srv = await loopback(LlamaCpp(Reply(text="on Friday")))
    config = BackendConfig(name="b", type="llamacpp", url=srv.url, template="starcoder")
    assert await complete(config) == "on Friday"
    prompt = next(r.json()["prompt"] for r in srv.requests if r.path == "/completion")
    assert prompt == (
        f"<file_sep>{CHUNK[0]}\n{CHUNK[1]}<file_sep>{WINDOW}\n"
        "<fim_prefix>The launch is <fim_suffix>.\n<fim_middle>"
    )


async def test_a_chat_backend_gets_the_chunks_in_its_prompt(loopback: StartServer) -> None:
    srv = await loopback(OpenAI(Reply(text="<fill>on Friday</fill>")))
    config = BackendConfig(name="b", type="openai-chat", url=srv.url, model="gpt-test")
    assert await complete(config) == "on Friday"
    body = next(r.json() for r in srv.requests if r.path.endswith("/chat/completions"))
    system, user = body["messages"][0]["content"], body["messages"][-1]["content"]
    assert user == (
        f'<context name="{CHUNK[0]}">{CHUNK[1]}</context>\n'
        f'<document name="{WINDOW}">The launch is <|HOLE|>.\n</document>'
    )
    assert "Text between <context> tags" in system


@pytest.mark.parametrize(
    ("type_name", "responder", "model"),
    [("ollama", Ollama, "qwen2.5-coder:1.5b-base"), ("mistral-fim", MistralFim, "codestral-2405")],
)
async def test_native_suffix_apis_without_a_context_field_get_none(
    loopback: StartServer, type_name: str, responder: type, model: str
) -> None:
    srv = await loopback(responder(Reply(text="on Friday")))
    config = BackendConfig(name="b", type=type_name, url=srv.url, model=model)  # type: ignore[arg-type]
    assert await complete(config) == "on Friday"
    sent = [json.dumps(r.json()) for r in srv.requests if r.method == "POST"]
    assert sent
    assert not any("Launch plan" in body or "Mousepad" in body for body in sent)


# -- a press end to end: the desktop faked at its ports, the real engine, a loopback server --

EDITOR = Target(window_id=1, app="Mousepad", process="mousepad", title="notes.txt - Mousepad")


class FieldsCapture(ReadingCapture):
    """Captures like the accessibility strategy: also the window's other text fields, when
    the pipeline asks for them (a platform boundary: AT-SPI itself needs a desktop)."""

    async def capture(self, target: Target, app: AppSettings) -> Captured:
        captured = await super().capture(target, app)
        if not app.read_fields:
            return captured
        context = replace(captured.context, fields=(("Subject", "Launch plan for Friday"),))
        return replace(captured, context=context)


async def presses(
    srv_url: str,
    target: Target,
    count: int,
    settings: Settings | None = None,
    *,
    clipboard_hint: bool = False,
) -> None:
    base = settings or Settings()
    config = BackendConfig(name="b", type="llamacpp", url=srv_url)
    settings = base.model_copy(
        update={"backends": [config], "routing": RoutingConfig(default=["b"])}
    )
    desktop, keys, clipboard, _ = fake_desktop(target)
    if clipboard_hint:
        snapshot = ClipSnapshot.from_text("Agenda for Monday")
        snapshot.items[PASSWORD_HINT] = (PASSWORD_HINT, 8, b"secret")
        clipboard.data["clipboard"] = snapshot
    capture = FieldsCapture("keyboard")
    capture.keys = keys
    async with Engine(settings) as engine:
        pipeline = Pipeline(desktop, engine, settings, {"keyboard": capture})
        for _ in range(count):
            keys.pasted.clear()
            await run(pipeline)
            assert pipeline.history[-1].status == "inserted", pipeline.history[-1].reason


def extras(srv: LoopbackServer) -> list[list[dict[str, str]]]:
    return [r.json()["input_extra"] for r in srv.requests if r.path == "/infill"]


async def test_a_press_sends_the_window_fields_then_what_the_user_accepted(
    loopback: StartServer, caplog: pytest.LogCaptureFixture
) -> None:
    srv = await loopback(LlamaCpp(default=Reply(text="big ")))
    caplog.set_level(logging.DEBUG)
    await presses(srv.url, EDITOR, 2)
    window = "Mousepad: notes.txt - Mousepad"
    first, second = extras(srv)
    assert first == [{"filename": f"{window} - Subject", "text": "Launch plan for Friday"}]
    assert second == [
        {"filename": f"{window} (accepted)", "text": "Hello big "},
        {"filename": f"{window} - Subject", "text": "Launch plan for Friday"},
    ]
    # The log holds no context unless privacy.log_text.
    assert "Launch plan" not in caplog.text
    assert "notes.txt" not in caplog.text


async def test_a_terminal_sends_no_title_and_a_password_manager_nothing(
    loopback: StartServer,
) -> None:
    srv = await loopback(LlamaCpp(default=Reply(text="big ")))
    # Without the default [[insert.apps]] rules (clipboard capture for terminals, password
    # managers disabled): the context rules hold on their own.
    bare = Settings(insert=InsertConfig(apps=[]))
    terminal = Target(window_id=2, app="XTerm", process="xterm", title="ssh root@db.internal")
    await presses(srv.url, terminal, 1, bare)
    assert extras(srv) == [[{"filename": "Subject", "text": "Launch plan for Friday"}]]
    srv.requests.clear()
    vault = Target(window_id=3, app="Bitwarden", process="bitwarden", title="My vault")
    await presses(srv.url, vault, 2, bare)
    assert extras(srv) == [[], []]


async def test_app_rules_turn_sources_off_and_the_clipboard_waits_to_be_asked(
    loopback: StartServer,
) -> None:
    srv = await loopback(LlamaCpp(default=Reply(text="big ")))
    rule = AppRule(match="mousepad", context_fields=False)
    settings = Settings(insert=InsertConfig(apps=[rule]))
    await presses(srv.url, EDITOR, 2, settings)
    window = "Mousepad: notes.txt - Mousepad"
    assert extras(srv) == [[], [{"filename": f"{window} (accepted)", "text": "Hello big "}]]
    # The user's clipboard ("user clipboard" in the fake) is sent only once turned on.
    assert not any("user clipboard" in json.dumps(r.json()) for r in srv.requests)
    srv.requests.clear()
    on = Settings(context=ContextConfig(clipboard=True, fields=False, accepted=False))
    await presses(srv.url, EDITOR, 1, on)
    assert extras(srv) == [[{"filename": "clipboard", "text": "user clipboard"}]]
    # A password manager's copy carries its hint: never kept.
    srv.requests.clear()
    await presses(srv.url, EDITOR, 1, on, clipboard_hint=True)
    assert extras(srv) == [[]]
