"""Late claims: what an application does with our select and copy keys after we moved on.

Chromium claims PRIMARY and CLIPBOARD asynchronously, late under load: after we already
restored the user's selections (it then holds document text in the user's CLIPBOARD or
PRIMARY), or after we decided that a side of the caret had nothing to select (then the
side was not empty, the context is wrong, and a selection is left in the document).

For a bounded time after a capture (and again after the insertion) :class:`LateClaims`
looks whether the target's program owns CLIPBOARD or PRIMARY and reads what it holds:

- text our keys made it copy or select: a stale claim; the user's content goes back;
- anything while a side was taken as empty: that side answered late; the capture is
  marked invalid (the press fails cleanly, nothing is inserted), the selection our keys
  left is collapsed, the user's content goes back, and the app's timings learn the delay;
- other text: the user's own copy or selection in the target; it stays;
- a claim that cannot be read in time: taken as caused by our keys (a busy app is a late
  one), so the user's content goes back rather than being lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from dataclasses import dataclass, field

from anyfill.daemon.desktop.capture.order import KeysHandled
from anyfill.daemon.desktop.capture.timings import AppTimings
from anyfill.daemon.desktop.ports import ClipSnapshot, Desktop, Offer, Target, Which
from anyfill.daemon.waiting import first_set

log = logging.getLogger("anyfill.capture.late")

POLL_S = 0.005
SELECTION_PROBE_S = 1.0
"""How long an app that just answered our keys late gets to copy a selection it still
shows, unless it shows sooner that it handled the copy key (capture/order.py)."""
HOLD_CAP_S = 10.0
"""Longest hold for an app that has not answered the pings of ``hold_for``."""
READ_TIMEOUT_S = 0.25
SELECTIONS: tuple[Which, ...] = ("clipboard", "primary")


@dataclass
class LateClaims:
    desktop: Desktop
    target: Target
    saved: dict[Which, ClipSnapshot]
    """The user's selections as they were before our keys."""
    sentinels: dict[Which, Offer]
    """Our last ownership of each selection before the keys that may be answered late."""
    ours: set[str]
    """Texts our keys made the app copy or select."""
    collapse: str | None
    """Set when the last side was taken as empty: the key that collapses a selection our
    select keys made there, should the app show one late."""
    all_ours: bool
    """Every claim by the target comes from our keys (the capture was cut short)."""
    timings: AppTimings
    keys_at: float
    """``time.monotonic()`` when we sent the select keys of the side taken as empty."""
    hold_for: KeysHandled | None = None
    """The pings after the last keys, when every side was taken as empty in an app never
    seen answering: the watch lasts until they were answered, or until the app's late
    claims came and ``seconds`` more passed (for the rest of them), at most
    HOLD_CAP_S."""
    copy_keys: str = "<ctrl>+c"
    """The app's copy keys (asking whether our keys left a selection)."""
    invalid: str = ""
    """Why the capture cannot be trusted ('' while it can)."""
    seconds: float = 0.0
    """How long one watch lasts (the app's settle time)."""
    _invalid_at: float | None = None
    """When a late answer made the capture invalid."""
    _checked_at: float | None = None
    """When we last looked and saw no late answer: a late claim came after this."""
    _users: set[Which] = field(default_factory=set)
    _task: asyncio.Task[None] | None = None

    def start(self, seconds: float) -> None:
        """Watch in the background for ``seconds`` (while the backend answers)."""
        self.seconds = seconds
        self._task = asyncio.get_running_loop().create_task(
            self.watch(seconds), name="anyfill-late-claims"
        )

    async def settled(self) -> str:
        """Wait for the background watch to end; why the capture is invalid, or ''."""
        await self.close()
        return self.invalid

    async def close(self) -> None:
        """Let a running watch finish (it is bounded): it may be restoring the user's data."""
        task = self._task
        if task is None:
            return
        while not task.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait([task])
        self._task = None
        if not task.cancelled() and task.exception() is not None:
            log.warning("watching for late claims failed: %s", task.exception())

    async def watch(self, seconds: float | None = None) -> None:
        """Handle claims as they come for ``seconds`` (by default the app's settle time),
        and, with ``hold_for``, until the app has read our keys."""
        began = time.monotonic()
        deadline = began + (self.seconds if seconds is None else seconds)
        while True:
            await self.check_now()
            now = time.monotonic()
            if now >= deadline and not self._held(now - began):
                return
            await asyncio.sleep(POLL_S)

    def _held(self, watched_s: float) -> bool:
        """Whether the watch goes on for the pings in ``hold_for`` (see there); marks
        the capture invalid when the app handled nothing within HOLD_CAP_S."""
        probe = self.hold_for
        if probe is None:
            return False
        if self._invalid_at is not None:
            return time.monotonic() - self._invalid_at < self.seconds
        if probe.answered.is_set() or (probe.finished.is_set() and not probe.unanswered):
            return False
        if watched_s < HOLD_CAP_S:
            return True  # frozen: when it thaws it handles our keys, and claims
        if not self.invalid:
            self.invalid = (
                f"the application showed no sign of handling anyfill's keys within"
                f" {HOLD_CAP_S:.0f} s; nothing was inserted (a selection may still appear"
                " when it does)"
            )
            log.warning("the target showed no sign of the capture keys in %.0f s", HOLD_CAP_S)
        return False

    async def check_now(self) -> None:
        clipboard = self.desktop.clipboard
        for which in SELECTIONS:
            if which in self._users:
                continue
            if clipboard.holder(which) == "nobody":
                if not self.saved[which].empty:
                    # The app let go after our keys (GTK gives PRIMARY up on a collapse).
                    log.debug("%s: nobody owns it after our keys; restoring", which)
                    await self._restore(which)
                continue
            if not clipboard.owned_by_program_of(which, self.target.window_id):
                continue
            text = await clipboard.read_text(which, READ_TIMEOUT_S)
            if self.all_ours or (text is not None and text in self.ours):
                log.info("%s: a late claim by the app, caused by our keys; restoring", which)
            elif self.collapse is not None or self.invalid:
                # Any claim, readable or not, may be the late answer of the side taken as
                # empty: the capture cannot be trusted.
                if not self.invalid:
                    await self._late_side(which, text)
            elif text is None:
                # Unreadable in time (the app is busy: the very state that makes its claims
                # late). Taken for the user's own, our keys' selection would stay in the
                # user's PRIMARY for good, and their content exists nowhere else.
                log.info("%s: a claim by the app that could not be read; restoring", which)
            else:
                log.debug("%s: the user's own copy or selection in the target; it stays", which)
                self._users.add(which)
                continue
            await self._restore(which)
        self._checked_at = time.monotonic()

    async def _restore(self, which: Which) -> None:
        """The user's content back, as of our last sentinel (or the claim we undo), so that
        a claim made after it (the user selecting something now) still wins; failing
        that (the server saw a later change we did not), as of now."""
        clipboard, snapshot = self.desktop.clipboard, self.saved[which]
        await clipboard.restore(which, snapshot, as_of=self.sentinels.get(which))
        wanted = "nobody" if snapshot.empty else "us"
        holder = clipboard.holder(which)
        if holder == wanted:
            return
        if holder == "other" and not clipboard.owned_by_program_of(which, self.target.window_id):
            return  # a third program took it meanwhile: theirs now
        await clipboard.restore(which, snapshot)

    async def _late_side(self, which: Which, text: str | None) -> None:
        """The side we took as empty answered now: the context is wrong."""
        # Between our last look and now: learn the earliest, or one look after a long
        # backend wait would make every later wait in this app far too long.
        late = (self._checked_at or time.monotonic()) - self.keys_at
        self.timings.note_reaction(self.target.app, late)
        if text:
            self.ours.add(text)
        self.invalid = (
            f"the application answered anyfill's select keys only after {late * 1000:.0f} ms,"
            " after anyfill had stopped waiting; the context was incomplete, so nothing was"
            " inserted (anyfill now waits longer for this app: press the hotkey again)"
        )
        log.warning("%s: late claim %.0f ms after the select keys", which, late * 1000)
        self._invalid_at = time.monotonic()
        collapse, self.collapse = self.collapse, None
        now = self.desktop.windows.focused()
        if collapse is None or now is None or now.window_id != self.target.window_id:
            return
        # The select keys may have left a selection we never collapsed (a paste would
        # replace it, typing too), or none (the caret at that edge: then the collapse
        # key would move the caret).
        if await self._selection_left():
            await self.desktop.keys.press(collapse)
        # Further claims of this text are stale ones: restore, as for any side we copied.

    async def _selection_left(self) -> bool:
        """Whether our keys left a selection, asked with the copy key once the app has
        handled them: it copies only a selection. The user's CLIPBOARD goes back after."""
        clipboard = self.desktop.clipboard
        probe = ClipSnapshot.from_text(f"anyfill-sentinel-{uuid.uuid4().hex}")
        offer = await clipboard.offer("clipboard", probe)
        self.sentinels["clipboard"] = offer
        await self.desktop.keys.press(self.copy_keys)
        handled = KeysHandled(
            self.desktop.windows, self.target.window_id, relayed=self.target.relays_input
        )
        await first_set(offer.lost, handled.answered, timeout_s=SELECTION_PROBE_S)
        left = offer.lost.is_set()
        if left:
            copied = await clipboard.read_text("clipboard", READ_TIMEOUT_S)
            if copied:
                self.ours.add(copied)
        log.debug("asked with the copy key, a selection is %s", "left" if left else "not left")
        await self._restore("clipboard")
        return left
