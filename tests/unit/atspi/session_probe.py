"""The child process of test_session.py: drives a real AtspiSession against the
accessibility bus the test started, and prints what it saw as one JSON line.

A process of its own because libatspi's state is process-wide: its connection to the
bus is made once and lives as long as the process (the pytest process must not keep a
connection to a bus the test takes down).

Cases (the first argument):
- ``threads``: callers on the asyncio loop and on plain threads at once; each work makes
  real libatspi calls and notes its thread and how many works were running with it.
- ``objects``: where libatspi objects made by a work are finalized when the work
  raises (from the loop and from a plain thread) and when it returns one.
"""

from __future__ import annotations

import asyncio
import gc
import json
import sys
import threading
import time
from typing import Any

from anyfill.daemon.atspi.session import AtspiSession

LOOP_CALLS = 12
THREADS = 3
THREAD_CALLS = 6
WITHIN_S = 60.0
"""Bounds, not timings: a loaded machine answers slowly, and no figure is asserted."""


def threads(session: AtspiSession) -> dict[str, Any]:
    state = threading.Lock()
    running = [0]
    seen: list[dict[str, Any]] = []

    def work(atspi: Any) -> int:
        with state:
            running[0] += 1
            overlap = running[0]
        try:
            desktop = atspi.get_desktop(0)
            count = int(desktop.get_child_count())
            name = str(desktop.get_name() or "")
            time.sleep(0.002)  # widens the window in which a second work could overlap
            role = desktop.get_role() == atspi.Role.DESKTOP_FRAME
        finally:
            with state:
                running[0] -= 1
        with state:
            seen.append(
                {
                    "thread": threading.get_ident(),
                    "name": threading.current_thread().name,
                    "overlap": overlap,
                    "desktop": [name, role, count],
                }
            )
        return count

    callers: list[int] = []
    failures: list[str] = []

    def from_a_thread() -> None:
        callers.append(threading.get_ident())
        for _ in range(THREAD_CALLS):
            try:
                session.call_blocking(work, WITHIN_S)
            except Exception as exc:  # reported to the test
                failures.append(repr(exc))

    async def from_the_loop() -> None:
        callers.append(threading.get_ident())
        plain = [threading.Thread(target=from_a_thread) for _ in range(THREADS)]
        for thread in plain:
            thread.start()
        answers = await asyncio.gather(
            *(session.call(work, WITHIN_S) for _ in range(LOOP_CALLS)), return_exceptions=True
        )
        failures.extend(repr(a) for a in answers if isinstance(a, BaseException))
        for thread in plain:
            await asyncio.to_thread(thread.join)

    asyncio.run(from_the_loop())
    return {"works": seen, "callers": callers, "failures": failures}


def objects(session: AtspiSession) -> dict[str, Any]:
    finalized: dict[str, list[str]] = {}
    session_thread: list[str] = []

    def made(atspi: Any, case: str) -> Any:
        """A libatspi object only this work holds, noting the thread it is finalized on."""
        session_thread.append(threading.current_thread().name)
        state = atspi.StateSet.new([atspi.StateType.FOCUSED])
        state.weak_ref(lambda: finalized.setdefault(case, []).append(_thread()))
        assert state.contains(atspi.StateType.FOCUSED)
        return state

    def raises(atspi: Any, case: str) -> None:
        state = made(atspi, case)
        raise LookupError(f"the work failed holding {state.get_states()}")

    outcomes: dict[str, str] = {}

    async def on_the_loop() -> None:
        for case, work in [
            ("raised on the loop", lambda atspi: raises(atspi, "raised on the loop")),
            ("returned", lambda atspi: ("text", made(atspi, "returned"))),
        ]:
            try:
                await session.call(work, WITHIN_S)
                outcomes[case] = "returned"
            except Exception as exc:  # reported to the test
                outcomes[case] = type(exc).__name__

    asyncio.run(on_the_loop())

    def in_a_thread() -> None:
        case = "raised in a thread"
        try:
            session.call_blocking(lambda atspi: raises(atspi, case), WITHIN_S)
            outcomes[case] = "returned"
        except Exception as exc:  # reported to the test
            outcomes[case] = type(exc).__name__

    caller = threading.Thread(target=in_a_thread, name="plain-caller")
    caller.start()
    caller.join()
    gc.collect()
    # A last call: whatever the session still held from the cases is dropped by now.
    session.call_blocking(lambda atspi: None, WITHIN_S)
    gc.collect()
    return {"finalized": finalized, "outcomes": outcomes, "session": sorted(set(session_thread))}


def _thread() -> str:
    return threading.current_thread().name


def main() -> None:
    session = AtspiSession()
    result = {"threads": threads, "objects": objects}[sys.argv[1]](session)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
