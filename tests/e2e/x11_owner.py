"""A CLIPBOARD owner that misbehaves, in its own process, written with python-xlib.

``python -m tests.e2e.x11_owner MODE TEXT_FILE READY_FILE [--formats N] [--delay-ms D]``

It owns CLIPBOARD holding the text in TEXT_FILE as UTF8_STRING, offered *last* after
N-1 other formats (``application/x-anyfill-test-I``, each answered with its own bytes),
and answers one request at a time, ``D`` ms each. Modes for UTF8_STRING:

- ``plain``: the text in one property;
- ``drip``: an incremental (INCR) transfer that sends 16 bytes every 0.3 s for 60 s;
- ``flood``: an endless incremental transfer of 200 KiB chunks, as fast as they are read.

It writes READY_FILE once it owns the clipboard, and exits when another program takes it.
"""

from __future__ import annotations

import argparse
import select
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from Xlib import X, Xatom, display
from Xlib.protocol import event as xevent

DRIP_EVERY_S = 0.3
DRIP_FOR_S = 60.0
FLOOD_CHUNK = b"x" * (200 << 10)
"""Below the largest request without BIG-REQUESTS (256 KiB), which python-xlib lacks."""


def format_data(name: str) -> bytes:
    """What the owner serves for one of its extra formats (tests check it came back)."""
    return f"data of {name}".encode()


def format_names(count: int) -> list[str]:
    return [f"application/x-anyfill-test-{i}" for i in range(count - 1)] + ["UTF8_STRING"]


@dataclass
class Transfer:
    requestor: Any
    prop: int
    type_atom: int
    started: float
    next_at: float = 0.0
    waiting_delete: bool = True


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("plain", "drip", "flood"))
    parser.add_argument("text_file")
    parser.add_argument("ready_file")
    parser.add_argument("--formats", type=int, default=40)
    parser.add_argument("--delay-ms", type=float, default=0.0)
    args = parser.parse_args()
    text = Path(args.text_file).read_bytes()
    names = format_names(args.formats)

    d = display.Display()
    window = d.screen().root.create_window(
        0, 0, 1, 1, 0, X.CopyFromParent, event_mask=X.PropertyChangeMask
    )
    clipboard = d.intern_atom("CLIPBOARD")
    atoms = {name: d.intern_atom(name) for name in names}
    by_atom = {atom: name for name, atom in atoms.items()}
    targets, incr, utf8 = d.intern_atom("TARGETS"), d.intern_atom("INCR"), atoms["UTF8_STRING"]
    window.set_selection_owner(clipboard, X.CurrentTime)
    d.flush()
    if d.get_selection_owner(clipboard).id != window.id:
        raise SystemExit("could not own CLIPBOARD")
    Path(args.ready_file).write_text("ready")
    transfers: dict[tuple[int, int], Transfer] = {}

    def answer(request: Any) -> None:
        if args.delay_ms:
            time.sleep(args.delay_ms / 1000)
        prop = request.property or request.target
        requestor, ok = request.requestor, True
        if request.target == targets:
            requestor.change_property(prop, Xatom.ATOM, 32, [targets, *atoms.values()])
        elif request.target == utf8 and args.mode != "plain":
            requestor.change_attributes(event_mask=X.PropertyChangeMask)
            requestor.change_property(prop, incr, 32, [len(text)])
            transfers[(requestor.id, prop)] = Transfer(requestor, prop, utf8, time.monotonic())
        elif request.target == utf8:
            requestor.change_property(prop, utf8, 8, text)
        elif request.target in by_atom:
            requestor.change_property(prop, request.target, 8, format_data(by_atom[request.target]))
        else:
            ok = False
        notify = xevent.SelectionNotify(
            time=request.time,
            requestor=requestor,
            selection=request.selection,
            target=request.target,
            property=prop if ok else X.NONE,
        )
        requestor.send_event(notify, event_mask=0)
        d.flush()

    def send_due() -> None:
        now = time.monotonic()
        for key, transfer in list(transfers.items()):
            if transfer.waiting_delete or now < transfer.next_at:
                continue
            if args.mode == "drip":
                over = now - transfer.started > DRIP_FOR_S
                chunk = b"" if over else b"drip drip drip. "
                transfer.next_at = now + DRIP_EVERY_S
            else:
                chunk = FLOOD_CHUNK
            transfer.requestor.change_property(transfer.prop, transfer.type_atom, 8, chunk)
            transfer.waiting_delete = True
            if not chunk:
                del transfers[key]
        d.flush()

    while True:
        due = [t.next_at for t in transfers.values() if not t.waiting_delete]
        timeout = max(0.0, min(due) - time.monotonic()) if due else None
        if not d.pending_events():
            select.select([d.fileno()], [], [], timeout)
        while d.pending_events():
            ev = d.next_event()
            if ev.type == X.SelectionRequest:
                answer(ev)
            elif ev.type == X.SelectionClear:
                return
            elif ev.type == X.PropertyNotify and ev.state == X.PropertyDelete:
                transfer = transfers.get((ev.window.id, ev.atom))
                if transfer is not None:
                    transfer.waiting_delete = False
        send_due()


if __name__ == "__main__":
    main()
