"""The ``anyfill`` executable's entry point.

``anyfill trigger ACTION`` runs on every press of a desktop shortcut, so it goes straight to
the standard-library client (:mod:`anyfill.daemon.control.trigger_cmd`): importing click and
importlib.metadata would roughly double its start (measured by ``bench/bench_trigger.py``).
Every other command is the click command line, :mod:`anyfill.daemon.cli`.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["trigger"]:
        from anyfill.daemon.control.trigger_cmd import fast_main

        code = fast_main(args[1:])
        if code is not None:
            return code
    from anyfill.daemon.cli import main as cli_main

    return cli_main(args)


if __name__ == "__main__":
    sys.exit(main())
