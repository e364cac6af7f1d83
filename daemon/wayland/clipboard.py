"""The clipboard through a data-control route: wl-clipboard's wl-copy and wl-paste.

sway, Hyprland and KWin offer a data-control protocol, so wl-clipboard reads and sets the
clipboard without a focused window of ours. What it cannot do, and what we do instead:

- wl-copy serves one format per process. A snapshot keeps every format, but a restore puts
  back the text formats (or, without text, the first format): rich formats of a mixed
  clipboard (an HTML copy from a browser) come back as their plain text. ``doctor`` says so.
- No client is told when another one reads the clipboard, so "the app fetched the paste"
  is a settle time after the offer (:data:`SETTLE_S`, espanso's default restore delay).
- Someone else copying is seen by ``wl-paste --watch``: each change is compared with what we
  offered; different content means the clipboard is theirs and is not restored over.

Plain text reads go through pyperclip, which itself uses wl-paste on Wayland.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import subprocess
from dataclasses import dataclass
from types import TracebackType
from typing import Literal

from anyfill.daemon.desktop.ports import ClipSnapshot, Offer, Which, saved_or_refused
from anyfill.daemon.errors import DesktopUnavailable, InsertError

log = logging.getLogger("anyfill.wayland.clipboard")

SETTLE_S = 0.3
SNAPSHOT_TIMEOUT_S = 1.0
COPY_TIMEOUT_S = 2.0
_TEXT = ("text/plain;charset=utf-8", "UTF8_STRING", "text/plain", "TEXT", "STRING")


@dataclass
class _Ours:
    offer: Offer
    data: bytes
    mime: str


class WlClipboard:
    """The :class:`~anyfill.daemon.desktop.ports.Clipboard` port over wl-clipboard."""

    def __init__(self) -> None:
        self._ours: dict[Which, _Ours] = {}
        self._watchers: list[asyncio.subprocess.Process] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._no_primary = False
        """wl-copy found no primary selection (KWin 5.27): PRIMARY is left alone."""

    async def __aenter__(self) -> WlClipboard:
        missing = [tool for tool in ("wl-copy", "wl-paste") if shutil.which(tool) is None]
        if missing:
            raise DesktopUnavailable(
                "the Wayland clipboard needs wl-clipboard (Debian/Ubuntu: apt install wl-clipboard)"
            )
        for which in ("clipboard", "primary"):
            await self._watch(which)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for task in self._tasks:
            task.cancel()
        for process in self._watchers:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()

    async def _watch(self, which: Which) -> None:
        process = await asyncio.create_subprocess_exec(
            "wl-paste",
            *_flag(which),
            "--watch",
            "echo",
            "changed",
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self._watchers.append(process)
        self._tasks.append(asyncio.create_task(self._on_changes(which, process)))

    async def _on_changes(self, which: Which, process: asyncio.subprocess.Process) -> None:
        assert process.stdout is not None
        while await process.stdout.readline():
            ours = self._ours.get(which)
            if ours is None or ours.offer.lost.is_set():
                continue
            now = await _read(which, ours.mime, SNAPSHOT_TIMEOUT_S)
            if now != ours.data:
                log.debug("%s taken by another program", which)
                ours.offer.lost.set()

    async def snapshot(self, which: Which) -> ClipSnapshot:
        types = await _list_types(which)
        if not types:
            return ClipSnapshot()
        datas = await asyncio.gather(*(_read(which, t, SNAPSHOT_TIMEOUT_S) for t in types))
        return saved_or_refused(
            which,
            len(types),
            ClipSnapshot(
                {t: (t, 8, data) for t, data in zip(types, datas, strict=True) if data is not None}
            ),
        )

    async def offer(self, which: Which, snapshot: ClipSnapshot, reader: int | None = None) -> Offer:
        offer = Offer(snapshot)
        if which == "primary" and self._no_primary:
            return offer  # never lost: there is no PRIMARY to watch
        mime, data = _servable(snapshot)
        self._ours[which] = _Ours(offer, data, mime)
        try:
            await _copy(which, mime, data)
        except InsertError:
            if which != "primary":
                raise
            log.info("wl-copy cannot set the primary selection here; PRIMARY is left alone")
            self._no_primary = True
            self._ours.pop(which, None)
        asyncio.get_running_loop().call_later(SETTLE_S, offer.note_fetch)
        return offer

    async def restore(
        self,
        which: Which,
        snapshot: ClipSnapshot,
        reader: int | None = None,
        as_of: Offer | None = None,
    ) -> Offer | None:
        # ``as_of`` is ignored: a Wayland selection carries no time and its owner cannot
        # be seen, so a late claim could never show; the user's content always goes back.
        self._ours.pop(which, None)
        if which == "primary" and self._no_primary:
            return None
        if snapshot.empty:
            await _run(["wl-copy", *_flag(which), "--clear"])
            return None
        mime, data = _servable(snapshot)
        dropped = [t for t in snapshot.items if t != mime and t not in _TEXT]
        if dropped:
            log.info("restored the clipboard as %s; wl-copy cannot serve %s", mime, dropped)
        await _copy(which, mime, data)
        return Offer(snapshot)  # wl-copy serves it: reads of it cannot be seen here

    async def read_text(self, which: Which, timeout_s: float) -> str | None:
        if which == "clipboard":
            import pyperclip

            try:
                text = await asyncio.wait_for(asyncio.to_thread(pyperclip.paste), timeout_s)
            except (TimeoutError, pyperclip.PyperclipException) as exc:
                log.debug("reading the clipboard failed: %s", exc)
                return None
            return str(text) if text else None
        data = await _read(which, "text/plain;charset=utf-8", timeout_s)
        return data.decode("utf-8", "replace") if data is not None else None

    def owned_by_program_of(self, which: Which, window_id: int) -> bool:
        return False  # the owner of a Wayland selection cannot be told apart

    def holder(self, which: Which) -> Literal["us", "nobody", "other"]:
        return "other"  # unknown here: late claims are left alone


def _servable(snapshot: ClipSnapshot) -> tuple[str, bytes]:
    """The one format wl-copy will serve: text where there is any (wl-copy adds the other
    text names), else the first format."""
    text = snapshot.text()
    if text is not None:
        return "text/plain;charset=utf-8", text.encode("utf-8")
    mime, (_, _, value) = next(iter(snapshot.items.items()))
    return mime, value if isinstance(value, bytes) else bytes(value)


def _flag(which: Which) -> list[str]:
    return ["--primary"] if which == "primary" else []


async def _copy(which: Which, mime: str, data: bytes) -> None:
    """wl-copy returns once the compositor made it the owner; its server stays behind
    (its own session), so a restored clipboard outlives the daemon. The server inherits
    our end of any pipe, so its output goes nowhere: a pipe would never reach its end."""
    process = await asyncio.create_subprocess_exec(
        "wl-copy",
        *_flag(which),
        "--type",
        mime,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    assert process.stdin is not None
    process.stdin.write(data)
    await process.stdin.drain()
    process.stdin.close()
    try:
        async with asyncio.timeout(COPY_TIMEOUT_S):
            code = await process.wait()
    except TimeoutError:
        process.kill()
        await process.wait()
        raise InsertError("wl-copy did not take the clipboard in time") from None
    if code != 0:
        raise InsertError(f"wl-copy failed with status {code}")


async def _list_types(which: Which) -> list[str]:
    out = await _run(["wl-paste", *_flag(which), "--list-types"])
    return [line for line in out.decode("utf-8", "replace").splitlines() if line]


async def _read(which: Which, mime: str, timeout_s: float) -> bytes | None:
    try:
        async with asyncio.timeout(timeout_s):
            process = await asyncio.create_subprocess_exec(
                "wl-paste",
                *_flag(which),
                "--no-newline",
                "--type",
                mime,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
            try:
                out, _ = await process.communicate()
            finally:
                if process.returncode is None:
                    process.kill()
                    await process.wait()
    except TimeoutError:
        return None
    return out if process.returncode == 0 else None


async def _run(args: list[str]) -> bytes:
    """Bounded: KWin 5.27 sends a new data-control client no selection event while the
    clipboard is empty, and wl-paste then waits for one forever."""
    process = await asyncio.create_subprocess_exec(
        *args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    try:
        async with asyncio.timeout(SNAPSHOT_TIMEOUT_S):
            out, _ = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        log.debug("%s did not answer in time", " ".join(args))
        return b""
    return out if process.returncode == 0 else b""


async def hand_over(which: Which, snapshot: ClipSnapshot) -> None:
    """Leave ``snapshot`` with a wl-copy server that outlives us (its text, or its first
    format: one format per process), so that the clipboard is not gone when we exit."""
    if snapshot.empty or not wl_clipboard_installed():
        return
    mime, data = _servable(snapshot)
    await _copy(which, mime, data)


def wl_clipboard_installed() -> bool:
    return all(shutil.which(tool) for tool in ("wl-copy", "wl-paste"))


__all__ = ["WlClipboard", "hand_over", "wl_clipboard_installed"]
