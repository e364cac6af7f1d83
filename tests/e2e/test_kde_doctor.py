"""``anyfill doctor`` in a real KDE session (KWin headless, its own session bus) whose
xdg-desktop-portal is installed but finds no backend, as on Plasma without
xdg-desktop-portal-kde active (issue #25): doctor says what it asked and what came back,
not "install xdg-desktop-portal"."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.kde import PORTAL_KDE, UNUSABLE, KdeSession

pytestmark = [pytest.mark.desktop, pytest.mark.skipif(bool(UNUSABLE), reason=UNUSABLE)]


class KdeWithoutPortalBackend(KdeSession):
    portal_backend = False


@pytest.fixture(scope="module")
def kde() -> Iterator[KdeSession]:
    with KdeWithoutPortalBackend.start() as session:
        yield session


@pytest.mark.skipif(not PORTAL_KDE.exists(), reason="needs xdg-desktop-portal-kde (apt)")
def test_doctor_says_the_kde_portal_backend_is_not_active(kde: KdeSession, tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        '[[backends]]\nname = "x"\ntype = "llamacpp"\nurl = "http://127.0.0.1:9"\n'
        '[routing]\ndefault = ["x"]\n'
    )
    out = kde.run(
        sys.executable, "-m", "anyfill.daemon.cli", "--config", str(config), "doctor", check=False
    )
    lines = {line.split()[1]: line for line in out.splitlines() if len(line.split()) > 1}
    keys, hotkeys = lines["keys"], lines["hotkeys"]
    assert "install xdg-desktop-portal" not in out, out
    assert keys.startswith("warn"), out
    assert "our own virtual keyboard: " in keys
    assert "the RemoteDesktop portal: asked the portal for RemoteDesktop: " in keys
    assert "org.freedesktop.DBus.Error" in keys  # what the portal answered
    assert f"xdg-desktop-portal-kde ({PORTAL_KDE}) are installed" in keys
    assert "is not active for this session (XDG_CURRENT_DESKTOP=KDE" in keys
    assert "systemctl --user restart xdg-desktop-portal" in keys
    assert "asked the portal for GlobalShortcuts: " in hotkeys
    assert "xdg-desktop-portal-kde" in hotkeys
