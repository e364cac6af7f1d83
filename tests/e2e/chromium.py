"""Chromium as the desktop tests start it: Debian's build, a private profile, one local
page as an app window (no tabs, no first-run dialogs), software rendering."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

from tests.e2e.harness import XSession, wait_until
from tests.servers.http import LoopbackServer, RecordedRequest, Response

CHROMIUM = shutil.which("chromium")
SKIP_REASON = "needs chromium (Debian)"


def app_command(profile: Path, url: str, *extra: str) -> list[str]:
    """The command line of a Chromium showing ``url`` alone, ``extra`` flags added."""
    if CHROMIUM is None:
        raise RuntimeError(SKIP_REASON)
    return [
        CHROMIUM,
        "--no-sandbox",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-gpu",
        "--password-store=basic",
        *extra,
        f"--user-data-dir={profile}",
        f"--app={url}",
    ]


def page_url(page: Path, start: dict[str, Any]) -> str:
    """A target page's address; the page reads ``start`` from its hash."""
    return page.as_uri() + "#" + quote(json.dumps(start))


class StateRecorder:
    """Keeps the last state a target page posted."""

    def __init__(self) -> None:
        self.state: dict[str, Any] = {}

    async def __call__(self, request: RecordedRequest, response: Response) -> None:
        if request.method == "POST" and request.body:
            self.state = json.loads(request.body)
        await response.body(204, b"")


PageOpener = Callable[[dict[str, Any], Callable[[dict[str, Any]], bool]], StateRecorder]
"""Opens the page with a start state (``report`` is added), returns once ``loaded`` holds
for what it posted and its field has the focus."""


@contextlib.contextmanager
def page_windows(
    x: XSession, page: Path, name: str, *flags: str, env: dict[str, str] | None = None
) -> Iterator[PageOpener]:
    """Chromium app windows showing ``page``, each in a new profile with ``flags`` added
    (and ``env`` added to the session's environment), all posting their state to one
    recorder; closed at the end."""
    recorder = StateRecorder()
    processes: list[subprocess.Popen[bytes]] = []
    try:
        with LoopbackServer.in_thread(recorder) as server:

            def open_page(
                start: dict[str, Any], loaded: Callable[[dict[str, Any]], bool]
            ) -> StateRecorder:
                url = page_url(page, {**start, "report": server.url + "/state"})
                profile = x.workdir / f"{name}-{len(processes)}"
                command = app_command(profile, url, *flags)
                processes.append(x.spawn(command, f"{name}.log", env={**x.env, **(env or {})}))
                wid = x.find_window("chromium", within=60)
                wait_until(lambda: loaded(recorder.state), 60, "the page to load")
                x.focus(wid, exact=False)
                # The field is the page's active element from the start; keys reach it
                # only once Chromium has the window's focus (under load the first key of
                # a burst was lost before that: a page held "ello" for "hello").
                wait_until(
                    lambda: recorder.state.get("focused") and recorder.state.get("active"),
                    10,
                    "the page's field focus",
                )
                return recorder

            yield open_page
    finally:
        for process in processes:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(20)
