"""Autostart on macOS: a LaunchAgent in ``~/Library/LaunchAgents``. UNTESTED on macOS: the
plist's content is checked on Linux, loading it is not.

The agent loads at the next log-in (``RunAtLoad``); anyfill is not started now. Its
Accessibility and Input Monitoring grants belong to the program launchd starts, so a new
interpreter or a re-signed app asks for them again (docs/packaging.md).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from pathlib import Path

from anyfill.daemon.autostart import entries
from anyfill.daemon.autostart.files import Manifest, Plan, state_of
from anyfill.daemon.autostart.status import AutostartStatus, Entry

# launchd's own PATH is /usr/bin:/bin:/usr/sbin:/sbin; add Homebrew's and the user's tools.
AGENT_PATH = "/opt/homebrew/bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"


class MacAutostart:
    def __init__(self, argv: Sequence[str], home: Path | None = None) -> None:
        self.argv = tuple(argv)
        self.home = home or Path.home()
        self.agent = self.home / "Library" / "LaunchAgents" / f"{entries.MAC_LABEL}.plist"
        support = self.home / "Library" / "Application Support" / "anyfill"
        self.manifest = Manifest(support / "autostart.json")
        self.log_file = str(self.home / "Library" / "Logs" / "anyfill" / "launchd.log")

    def _content(self) -> bytes:
        bin_dir = os.path.dirname(self.argv[0])
        return entries.launch_agent(self.argv, f"{bin_dir}:{AGENT_PATH}", self.log_file)

    def enable(self, *, force: bool = False) -> list[str]:
        plan = Plan(self.manifest, force)
        plan.write(self.agent, self._content())
        done = plan.apply()
        Path(self.log_file).parent.mkdir(parents=True, exist_ok=True)
        done.append("anyfill starts at your next log-in (launchd loads the agent then)")
        return done

    def disable(self, *, force: bool = False) -> list[str]:
        plan = Plan(self.manifest, force)
        plan.remove(self.agent)
        done = plan.apply()
        return done or ["autostart was already off"]

    def status(self) -> AutostartStatus:
        state = state_of(self.agent, self._content(), self.manifest)
        found = [] if state == "absent" else [Entry("launchagent", str(self.agent), state)]
        return AutostartStatus(found, "absent", shlex.join(self.argv))
