"""Keyboard capture: select to the document (or line) edge, copy, collapse the selection back.

Before each copy we own CLIPBOARD and PRIMARY with a sentinel. Any selection makes the
application take PRIMARY, and the copy makes it take CLIPBOARD, so losing either within
``empty_timeout_ms`` means there was text; losing neither means the caret sits at that
edge, and then the collapse key is not pressed (it would move the caret). The user's
clipboard and PRIMARY are saved first and put back afterwards.

A side taken as empty cannot be told from one the app has not answered yet, so it costs a
watch for late claims before the paste. The suffix avoids that when the prefix ends in a
plain character: Left first, so the selection starts one character early and is never
empty (see :func:`anchor_of`); the copy then always comes, and that character is cut off.
"""

from __future__ import annotations

import logging
import time
import unicodedata
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from anyfill.config.model import CaptureConfig, CaptureStrategy
from anyfill.daemon.desktop.apprules import AppSettings
from anyfill.daemon.desktop.capture.base import Captured, trimmed
from anyfill.daemon.desktop.capture.late_claims import LateClaims
from anyfill.daemon.desktop.capture.order import KeysHandled
from anyfill.daemon.desktop.capture.timings import AppTimings
from anyfill.daemon.desktop.ports import ClipSnapshot, Desktop, Offer, Target, Which
from anyfill.daemon.errors import CaptureError
from anyfill.daemon.settings.live import Reader, reader
from anyfill.daemon.waiting import first_set

log = logging.getLogger("anyfill.capture.keyboard")

SELECT = {
    "document": ("<ctrl>+<shift>+<home>", "<ctrl>+<shift>+<end>"),
    "line": ("<shift>+<home>", "<shift>+<end>"),
}
# Right collapses a selection to its end, Left to its start, in every toolkit we test.
COLLAPSE_PREFIX = "<right>"
COLLAPSE_SUFFIX = "<left>"
COLLAPSE = (COLLAPSE_PREFIX, COLLAPSE_SUFFIX)
MIN_EMPTY_S = 0.02
"""Floor of every learned "nothing selected" wait."""
EMPTY_WAIT_CAP_S = 1.0
PREFIX_MARGIN = 5.0
"""The first side waits this many times the app's slowest recent reaction: a late answer
there would be mistaken for the second side's, so it cannot be caught afterwards."""
SUFFIX_MARGIN = 3.0
SUFFIX_NOW_MARGIN = 6.0
SETTLE_CAP_S = 0.6
"""Stale claims are watched for twice the app's slowest reaction, at most this long;
checked again right before the paste and after it."""
EMPTY_SIDE_SETTLE_S = 0.1
"""When the last side was taken as empty, four times the slowest reaction and at least
this long: a late answer there leaves a selection that a paste would replace, so nothing
is inserted before this has passed (it overlaps the backend's answer)."""
UNSEEN_EMPTY_SETTLE_S = EMPTY_WAIT_CAP_S
"""When every side was taken as empty in an app that never showed how fast it answers (a
fresh daemon's first press, or an empty document): nothing tells an app that has not
read our keys yet from one with nothing to select. A late answer then comes after the
paste keys were queued behind our copy keys: the app pastes its own late copy over its
late selection and the collapse key moves the caret. So nothing is inserted before the
longest wait any app gets to show a selection has passed (it overlaps the backend's
answer), and, where the app shows it (capture/order.py), before it handled our keys."""
COPY_AFTER_SELECTION_S = 1.0
"""Once the app showed a selection, its copy is waited for at least this long."""
ANCHOR_KEY, UNANCHOR_KEY = "<left>", "<right>"
ANCHORED_WAIT_S = 2.0
"""How long an anchored side waits for its selection: one always comes, so a long wait
costs time only in an app that is busy anyway."""
ANCHOR_CATEGORIES = frozenset(
    {
        "Lu",
        "Ll",
        "Lt",
        "Lo",
        "Nd",
        "Nl",
        "No",
        "Pc",
        "Pd",
        "Ps",
        "Pe",
        "Pi",
        "Pf",
        "Po",
        "Sm",
        "Sc",
        "Zs",
    }
)
"""Characters that are a whole grapheme cluster on their own (one Left moves over exactly
them in every toolkit): letters, digits, punctuation, maths and currency signs, spaces.
Not marks, modifiers (emoji skin tones are Sk), symbols (emoji), controls or format
characters."""
HANGUL_JAMO = ((0x1100, 0x11FF), (0xA960, 0xA97F), (0xD7B0, 0xD7FF))
"""Jamo join their neighbours into one syllable cluster."""
SELECTIONS: tuple[Which, ...] = ("clipboard", "primary")


class KeyboardCapture:
    name: CaptureStrategy = "keyboard"

    @property
    def _config(self) -> CaptureConfig:
        # Read at each use: the settings in force, while what was learned here stays.
        return self._read_config()

    def __init__(
        self,
        desktop: Desktop,
        config: CaptureConfig | Reader[CaptureConfig],
        timings: AppTimings | None = None,
    ) -> None:
        self._desktop = desktop
        self._read_config = reader(config)
        self.timings = timings or AppTimings()
        self._late: LateClaims | None = None
        """The last capture's watch for late claims; the next capture waits for its end."""
        self._sentinels: dict[Which, Offer] = {}
        """Our last sentinel ownership of each selection, before the last select keys."""

    async def capture(self, target: Target, app: AppSettings) -> Captured:
        await self._finish_previous()
        select_prefix, select_suffix = SELECT[self._config.scope]
        sides: list[_Side] = []

        async def copy_both() -> None:
            sides.append(
                await self._copy_side(
                    target, select_prefix, COLLAPSE_PREFIX, app.copy_keys, self._prefix_wait(target)
                )
            )
            wait = self._suffix_wait(target, sides[0])
            stale = frozenset({sides[0].text} - {""})
            anchor = anchor_of(sides[0].text)
            suffix = None
            if anchor:
                try:
                    suffix = await self._copy_side(
                        target,
                        select_suffix,
                        COLLAPSE_SUFFIX,
                        app.copy_keys,
                        max(wait, ANCHORED_WAIT_S),
                        stale=stale,
                        anchor=anchor,
                    )
                except _AnchorMissing:
                    log.info(ANCHOR_MISSING_LOG)
            if suffix is None:
                suffix = await self._copy_side(
                    target, select_suffix, COLLAPSE_SUFFIX, app.copy_keys, wait, stale=stale
                )
            sides.append(suffix)
            if sides[0].empty and not sides[1].empty:
                sides[0] = await self._copy_side(
                    target,
                    select_prefix,
                    COLLAPSE_PREFIX,
                    app.copy_keys,
                    self._recheck_wait(target, sides[1]),
                    stale=frozenset({sides[1].text}),
                )

        late = await self._with_selections_kept(target, app.copy_keys, copy_both, sides)
        prefix, suffix = sides
        captured = trimmed(prefix.text, suffix.text, target, "keyboard", self._config)
        return replace(captured, late=late)

    async def read_back(self, target: Target, app: AppSettings) -> str | None:
        """The text before the caret now (the prefix side again), to check an insertion;
        None when it could not be read. The user's selections are kept as in a capture."""
        await self._finish_previous()
        select_prefix = SELECT[self._config.scope][0]
        sides: list[_Side] = []

        async def copy_prefix() -> None:
            sides.append(
                await self._copy_side(
                    target, select_prefix, COLLAPSE_PREFIX, app.copy_keys, self._prefix_wait(target)
                )
            )

        try:
            late = await self._with_selections_kept(target, app.copy_keys, copy_prefix, sides)
        except CaptureError as exc:
            log.info("reading the text back failed: %s", exc)
            return None
        if await late.settled():
            return None
        return sides[0].text

    async def _finish_previous(self) -> None:
        if self._late is not None:
            await self._late.close()
            self._late = None

    async def _with_selections_kept(
        self,
        target: Target,
        copy_keys: str,
        copy: Callable[[], Awaitable[None]],
        sides: list[_Side],
    ) -> LateClaims:
        """Run ``copy`` with the user's CLIPBOARD and PRIMARY saved and put back after,
        then watch for the app's late claims (started here, running on)."""
        clipboard = self._desktop.clipboard
        saved = {which: await clipboard.snapshot(which) for which in SELECTIONS}
        complete = False
        self._sentinels = {}
        try:
            await copy()
            complete = True
        finally:
            for which in SELECTIONS:
                # As of our last sentinel: a late claim caused by our keys then still wins
                # and shows (see Clipboard.restore); LateClaims undoes or judges it.
                await clipboard.restore(which, saved[which], as_of=self._sentinels.get(which))
            for side in sides:
                if side.answered_s is not None:
                    self.timings.note_reaction(target.app, side.answered_s)
            # The side whose keys went last (a prefix asked again comes after the suffix).
            last = max(sides, key=lambda side: side.keys_at) if sides else None
            late = LateClaims(
                self._desktop,
                target,
                saved,
                sentinels=dict(self._sentinels),
                ours={side.copied for side in sides if side.copied},
                # The last side taken as empty may still select late: then its collapse
                # key removes the selection and the capture is invalid.
                collapse=last.collapse if complete and last and last.empty else None,
                # A capture cut short: whatever the target claims next comes from our keys.
                all_ours=not complete,
                timings=self.timings,
                keys_at=last.keys_at if last is not None else time.monotonic(),
                copy_keys=copy_keys,
            )
            if late.collapse and self.timings.slowest_reaction(target.app) is None:
                settle = UNSEEN_EMPTY_SETTLE_S  # no side answered, none ever did here
                # An app that answers pings shows when it has read our keys (one that
                # relays them to a renderer, when that drew its window after): a frozen
                # one then handles them (its late claims fail the press) before the
                # paste keys can reach it.
                late.hold_for = last.handled if last is not None else None
                log.debug(
                    "every side taken as empty in an app never seen answering: holding"
                    " the paste until it shows it handled our keys%s",
                    " (drawn after them)" if target.relays_input else "",
                )
            elif late.collapse or late.all_ours:
                settle = self.timings.settle(target.app, EMPTY_SIDE_SETTLE_S, SETTLE_CAP_S)
            else:
                settle = self.timings.settle(target.app, 0.0, SETTLE_CAP_S, factor=2.0)
            late.start(settle)
            self._late = late
        return late

    def _prefix_wait(self, target: Target) -> float:
        """Before the first side answered: the configured wait for an app never seen,
        else a margin over the slowest reaction this app showed lately."""
        slowest = self.timings.slowest_reaction(target.app)
        if slowest is None:
            return self._config.empty_timeout_ms / 1000
        return min(EMPTY_WAIT_CAP_S, max(MIN_EMPTY_S, PREFIX_MARGIN * slowest))

    def _recheck_wait(self, target: Target, suffix: _Side) -> float:
        """The prefix was taken as empty before the app showed how fast it reacts now (a
        fresh daemon's first press under load). A late answer there shows nowhere:
        Chromium's claims for it carry the time of our keys, older than our next
        sentinel, so the X server drops them, and the suffix keys extend the late
        selection into exactly the suffix. The completion was then built with an empty
        prefix and reported inserted. So an empty prefix is asked again, with a wait
        fit to the reaction the suffix side just showed."""
        slowest = self.timings.slowest_reaction(target.app) or 0.0
        now = SUFFIX_NOW_MARGIN * (suffix.answered_s or 0.0)
        return min(EMPTY_WAIT_CAP_S, max(MIN_EMPTY_S, now, PREFIX_MARGIN * slowest))

    def _suffix_wait(self, target: Target, prefix: _Side) -> float:
        """The app just showed how fast it reacts now; a late answer on this side is
        caught afterwards (the capture then fails cleanly), so the margin is smaller."""
        slowest = self.timings.slowest_reaction(target.app)
        if prefix.answered_s is None and slowest is None:
            return self._config.empty_timeout_ms / 1000
        now = SUFFIX_NOW_MARGIN * (prefix.answered_s or 0.0)
        learned = SUFFIX_MARGIN * (slowest or 0.0)
        return min(EMPTY_WAIT_CAP_S, max(MIN_EMPTY_S, now, learned))

    async def _copy_side(
        self,
        target: Target,
        select: str,
        collapse: str,
        copy: str,
        empty_timeout_s: float,
        *,
        stale: frozenset[str] = frozenset(),
        anchor: str = "",
    ) -> _Side:
        """Copy one side; ``stale``: texts earlier sides selected (not an answer here).

        With ``anchor`` (the character before the caret, see :func:`anchor_of`) the
        selection starts one character early, so it is never empty; _AnchorMissing when the
        copy did not start with that character (the caret is back: copy the side plainly)."""
        keys, clipboard = self._desktop.keys, self._desktop.clipboard
        sentinel = ClipSnapshot.from_text(f"anyfill-sentinel-{uuid.uuid4().hex}")
        clip_offer = await clipboard.offer("clipboard", sentinel)
        primary_offer = await clipboard.offer("primary", sentinel)
        self._sentinels = {"clipboard": clip_offer, "primary": primary_offer}
        started = time.monotonic()
        if anchor:
            await keys.press(ANCHOR_KEY)
        await keys.press(select)
        await keys.press(copy)
        # In an app never seen answering, whether it has read our keys matters if this
        # side comes out empty (see UNSEEN_EMPTY_SETTLE_S).
        unseen = self.timings.slowest_reaction(target.app) is None
        handled = (
            KeysHandled(self._desktop.windows, target.window_id, relayed=target.relays_input)
            if unseen
            else None
        )
        deadline = started + empty_timeout_s
        while True:
            left = deadline - time.monotonic()
            selected = await first_set(clip_offer.lost, primary_offer.lost, timeout_s=left)
            if not selected or clip_offer.lost.is_set():
                break
            # Only PRIMARY: Chromium re-claims it with the previous side's selection,
            # late; that is no answer to these keys (a collapse key would move the caret).
            claimed = await clipboard.read_text("primary", self._config.copy_timeout_ms / 1000)
            if claimed is None or claimed not in stale:
                break
            log.debug("a stale PRIMARY claim with the previous side's text; still waiting")
            primary_offer = await clipboard.offer("primary", sentinel)
            self._sentinels["primary"] = primary_offer
        if not selected and anchor:
            # There is a selection to show: the app has not handled our keys yet.
            raise CaptureError(
                f"the application showed no selection within {empty_timeout_s * 1000:.0f} ms"
                " of anyfill's select keys (it is busy); nothing was inserted"
            )
        if not selected:
            log.debug("nothing selected within %.0f ms", empty_timeout_s * 1000)
            # Nothing to select (caret at this edge), or an app that has not read the keys.
            return _Side("", None, started, collapse, handled)
        answered = time.monotonic() - started
        # A selection was seen, so the copy is coming: under load Chromium's comes
        # hundreds of ms after it. Waiting long here costs time only when it never comes.
        timeout = max(self._config.copy_timeout_ms / 1000, COPY_AFTER_SELECTION_S)
        copied = await first_set(clip_offer.lost, timeout_s=timeout)
        text = await clipboard.read_text("clipboard", timeout)
        await keys.press(collapse)
        if anchor:
            await keys.press(UNANCHOR_KEY)
        # A round trip to the app (it owns the clipboard now): it answers after handling
        # the collapse key, so its reaction to losing the selection (GTK gives PRIMARY
        # up) is over before we restore the user's PRIMARY.
        await clipboard.read_text("clipboard", timeout)
        if not copied or text is None:
            raise CaptureError(f"the application did not copy the selection with {copy}")
        if anchor and not text.startswith(anchor):
            raise _AnchorMissing
        return _Side(text[len(anchor) :], answered, started, collapse, copied=text)


ANCHOR_MISSING_LOG = (
    "the anchored copy of the suffix did not start with the character before the caret;"
    " copying the suffix plainly"
)


class _AnchorMissing(Exception):
    """The anchored copy did not start with the character before the caret (rich text
    copies some characters differently)."""


@dataclass(frozen=True)
class _Side:
    text: str
    answered_s: float | None
    """How fast the app showed a selection; None when there was nothing to select."""
    keys_at: float
    """``time.monotonic()`` when the select keys were sent."""
    collapse: str
    """The key that collapses this side's selection."""
    handled: KeysHandled | None = None
    """The pings sent after this side's keys (only where they matter)."""
    copied: str = ""
    """What our keys made the app copy (``text`` with the anchor, if any)."""

    @property
    def empty(self) -> bool:
        return self.answered_s is None


def anchor_of(prefix: str) -> str:
    """The character before the caret when one Left moves over exactly it, else ''.

    It must be a grapheme cluster on its own whatever follows the caret: a letter, digit,
    punctuation or space that does not join its neighbours (see ANCHOR_CATEGORIES), after
    a character that cannot reach into it (a zero-width joiner, a mark such as a virama,
    a prefix format character). Newlines are left out: rich text copies block breaks as
    one or two of them."""
    if not prefix:
        return ""
    char = prefix[-1]
    if unicodedata.category(char) not in ANCHOR_CATEGORIES:
        return ""
    if any(low <= ord(char) <= high for low, high in HANGUL_JAMO):
        return ""
    if len(prefix) > 1 and unicodedata.category(prefix[-2]) in ("Mn", "Mc", "Me", "Cf"):
        return ""
    return char
