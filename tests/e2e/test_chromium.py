"""The same path in Chromium from Debian: it reads the pasted clipboard twice and inserts
the second read, so the user's clipboard may only come back after it went quiet.

The page posts its textarea's value and caret to a loopback recorder after each change.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tests.e2e.harness import Daemon, XSession, wait_until
from tests.e2e.test_qt_target import (
    USER_CLIP,
    USER_PRIMARY,
    answer_next,
    assert_selections_restored,
    infill,
    press,
    unique,
)
from tests.servers.http import LoopbackServer, RecordedRequest, Response
from tests.servers.llamacpp import LlamaCpp
from tests.servers.script import Reply

CHROMIUM = shutil.which("chromium")
pytestmark = [
    pytest.mark.desktop,
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (Debian)"),
]
PAGE = Path(__file__).with_name("chromium_target.html")


class StateRecorder:
    """Keeps the last state the page posted."""

    def __init__(self) -> None:
        self.state: dict[str, Any] = {}

    async def __call__(self, request: RecordedRequest, response: Response) -> None:
        if request.method == "POST" and request.body:
            self.state = json.loads(request.body)
        await response.body(204, b"")


@pytest.fixture
def chromium(x: XSession) -> Iterator[Any]:
    recorder = StateRecorder()
    processes: list[subprocess.Popen[bytes]] = []
    with LoopbackServer.in_thread(recorder) as server:

        def open_page(text: str, caret: int) -> StateRecorder:
            start = {"text": text, "caret": caret, "report": server.url + "/state"}
            url = PAGE.as_uri() + "#" + quote(json.dumps(start))
            profile = x.workdir / f"chromium-{len(processes)}"
            process = x.spawn(
                [
                    str(CHROMIUM),
                    "--no-sandbox",
                    "--no-first-run",
                    "--no-default-browser-check",
                    "--disable-gpu",
                    "--password-store=basic",
                    f"--user-data-dir={profile}",
                    f"--app={url}",
                ],
                "chromium.log",
            )
            processes.append(process)
            wid = x.find_window("chromium", within=60)
            wait_until(lambda: recorder.state.get("text") == text, 60, "the page to load")
            x.focus(wid, exact=False)
            wait_until(lambda: recorder.state.get("focused"), 10, "the textarea focus")
            return recorder

        yield open_page
    for process in processes:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(20)


@pytest.mark.parametrize(
    ("name", "reply"),
    [("mid_line", "big "), ("multi_line", "\n    return y ✓")],
)
def test_completion_in_chromium(
    name: str,
    reply: str,
    x: XSession,
    daemon: Daemon,
    llama: tuple[LlamaCpp, LoopbackServer],
    chromium: Any,
) -> None:
    if name == "mid_line":
        text = unique("Hello world")
        caret = 6
    else:
        text = unique("def f(x):") + "\n"
        caret = len(text) - 1
    page = chromium(text, caret)
    x.set_clipboard(USER_CLIP)
    x.set_clipboard(USER_PRIMARY, "primary")
    responder, server = llama
    answer_next(responder, Reply(text=reply))
    before = len(infill(server))

    outcome = press(x, daemon)

    assert (outcome.status, outcome.capture) == ("inserted", "keyboard"), outcome
    sent = infill(server)[before:]
    assert [(r.json()["input_prefix"], r.json()["input_suffix"]) for r in sent] == [
        (text[:caret], text[caret:])
    ]
    expected = text[:caret] + reply + text[caret:]
    wait_until(lambda: page.state.get("text") == expected, 5, "the completion in the page")
    end = caret + len(reply)
    wait_until(lambda: (page.state["start"], page.state["end"]) == (end, end), 5, "the caret")
    assert_selections_restored(x)
