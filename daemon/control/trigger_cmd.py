"""``anyfill trigger complete|preview|cancel [--wait]`` without click (standard library only).

Bound to a desktop shortcut it runs on every press, so the ``anyfill`` executable
(:mod:`anyfill.daemon.launcher`) sends this exact form here before loading click, pydantic
or importlib.metadata. Anything else (``--help``, a typo) goes to the click command, which
prints the usage; the click ``trigger`` command calls :func:`run_trigger` too.

Exit codes: 0 delivered, 1 refused or failed, 3 no daemon running.
"""

from __future__ import annotations

import sys

from anyfill.daemon.control.client import call
from anyfill.daemon.errors import ControlError, NotRunning

ACTIONS = ("complete", "preview", "cancel")
EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_NOT_RUNNING = 3


def parse(argv: list[str]) -> tuple[str, bool] | None:
    """``(action, wait)`` for ``ACTION [--wait]``; ``None`` for anything else."""
    wait = "--wait" in argv
    rest = [arg for arg in argv if arg != "--wait"]
    if len(rest) != 1 or rest[0] not in ACTIONS or len(argv) - len(rest) > 1:
        return None
    return rest[0], wait


def run_trigger(action: str, wait: bool) -> int:
    args: dict[str, object] = {"action": action}
    if wait:
        args["wait"] = True
    try:
        # Waiting covers a whole completion: the backend's own timeouts bound it.
        answer = call("trigger", args, timeout_s=300.0 if wait else 5.0)
    except NotRunning as exc:
        sys.stderr.write(f"anyfill: {exc}\n")
        return EXIT_NOT_RUNNING
    except ControlError as exc:
        sys.stderr.write(f"anyfill: error: {exc}\n")
        return EXIT_FAILURE
    outcome = answer.get("outcome")
    if isinstance(outcome, dict):
        from anyfill.daemon.control.render import outcome_line

        sys.stdout.write(outcome_line(outcome) + "\n")
        return EXIT_OK if outcome.get("status") in ("inserted", "clipboard") else EXIT_FAILURE
    return EXIT_OK


def fast_main(argv: list[str]) -> int | None:
    """Handle ``ACTION [--wait]``; ``None`` lets the click command handle ``argv``."""
    parsed = parse(argv)
    if parsed is None:
        return None
    return run_trigger(*parsed)
