"""The settings panel on the offscreen platform: edits on several pages save exactly those
keys with the user's comments intact; keys go to the keyring; bad values are named next to
their field and Save stays off; Test sends a real completion through the bridge."""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import re
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QPushButton
from pytestqt.qtbot import QtBot

from anyfill.config.presets import PRESETS
from anyfill.config.store import parse_settings
from anyfill.ui.bridge import CoreBridge
from anyfill.ui.settings.apps import AppsPage
from anyfill.ui.settings.backends import BackendsPage
from anyfill.ui.settings.capture import CapturePage
from anyfill.ui.settings.context import ContextPage
from anyfill.ui.settings.draft import load_for_editing
from anyfill.ui.settings.fields import HotkeyEdit
from anyfill.ui.settings.hotkeys import HotkeysPage
from anyfill.ui.settings.keynames import hotkey_label, readable_hotkeys
from anyfill.ui.settings.privacy import PrivacyPage
from anyfill.ui.settings.routing import RoutingPage
from anyfill.ui.settings.standalone import panel_core
from anyfill.ui.settings.window import SettingsWindow
from tests.servers.http import LoopbackServer
from tests.servers.llamacpp import LlamaCpp
from tests.servers.script import Reply
from tests.unit.foundation.conftest import file_keyring

__all__ = ["file_keyring"]

USER_FILE = """\
# my anyfill settings: keep these comments
[[backends]]
name = "local"   # the box under my desk
type = "llamacpp"
url = "http://127.0.0.1:8080"

[[backends]]
name = "codestral"
type = "mistral-fim"
url = "https://codestral.mistral.ai"
model = "codestral-latest"

[routing]
default = ["local", "codestral"]  # local first
hedge_after_ms = 0

[hotkeys]
complete = "<ctrl>+<alt>+<space>"  # the one I use

[privacy]
log_text = false  # never
"""


@pytest.fixture(autouse=True)
def isolated(
    tmp_path: Path, file_keyring: object, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """Qt's own settings (window size, last page), the keyring and the control socket's
    directory in temporary places; no API key from the environment of whoever runs the tests."""
    QSettings.setPath(QSettings.Format.NativeFormat, QSettings.Scope.UserScope, str(tmp_path))
    monkeypatch.delenv("MISTRAL_API_KEY", raising=False)
    runtime = Path(tempfile.mkdtemp(prefix="afp-"))  # a socket path must stay short
    runtime.chmod(0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    yield runtime
    shutil.rmtree(runtime, ignore_errors=True)


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(USER_FILE)
    return path


def open_window(qtbot: QtBot, config: Path, bridge: CoreBridge | None = None) -> SettingsWindow:
    window = SettingsWindow(bridge, config)
    qtbot.addWidget(window, before_close_func=lambda w: w.draft.revert())
    return window


def page(window: SettingsWindow, kind: type) -> object:
    for index, candidate in enumerate(window.pages):
        if isinstance(candidate, kind):
            window.nav.setCurrentRow(index)
            return candidate
    raise LookupError(kind)


def changed_lines(old: str, new: str) -> list[str]:
    return [
        line
        for line in difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]


def retype(qtbot: QtBot, widget: object, text: str) -> None:
    """Select everything in the field and type ``text`` as the user would."""
    qtbot.keyClick(widget, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier)
    qtbot.keyClick(widget, Qt.Key.Key_Delete)
    qtbot.keyClicks(widget, text)


def record(qtbot: QtBot, edit: HotkeyEdit, key: Qt.Key, mods: Qt.KeyboardModifier) -> None:
    qtbot.mouseClick(edit, Qt.MouseButton.LeftButton)
    assert edit.recording
    qtbot.keyClick(edit, key, mods)


def test_changes_on_several_pages_save_exactly_those_keys(qtbot: QtBot, config: Path) -> None:
    window = open_window(qtbot, config)
    window.show()
    assert not window.save_button.isEnabled()  # nothing changed yet

    backends = page(window, BackendsPage)
    assert isinstance(backends, BackendsPage)
    backends.list.setCurrentRow(0)
    retype(qtbot, backends.url, "http://127.0.0.1:8081")

    routing = page(window, RoutingPage)
    assert isinstance(routing, RoutingPage)
    routing.hedge.setValue(250)

    hotkeys = page(window, HotkeysPage)
    assert isinstance(hotkeys, HotkeysPage)
    ctrl_alt = Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.AltModifier
    record(qtbot, hotkeys.edits["complete"], Qt.Key.Key_J, ctrl_alt)

    privacy = page(window, PrivacyPage)
    assert isinstance(privacy, PrivacyPage)
    privacy.form.rows[1].editor.click()  # "Send captured text in MQTT events"

    assert window.save_button.isEnabled()
    qtbot.mouseClick(window.save_button, Qt.MouseButton.LeftButton)
    new = config.read_text()
    assert changed_lines(USER_FILE, new) == [
        '-url = "http://127.0.0.1:8080"',
        '+url = "http://127.0.0.1:8081"',
        "-hedge_after_ms = 0",
        "+hedge_after_ms = 250",
        '-complete = "<ctrl>+<alt>+<space>"  # the one I use',
        '+complete = "<ctrl>+<alt>+j"  # the one I use',
        "+mqtt_text = true",
    ]
    assert window.problem.text() == "Saved. anyfill uses it from its next start."
    assert not window.save_button.isEnabled()


def test_an_api_key_goes_to_the_keyring_never_to_the_file(qtbot: QtBot, config: Path) -> None:
    import keyring

    window = open_window(qtbot, config)
    backends = page(window, BackendsPage)
    assert isinstance(backends, BackendsPage)
    backends.list.setCurrentRow(1)  # codestral
    assert backends.key_status.text() == "no key stored and $MISTRAL_API_KEY is not set"
    qtbot.keyClicks(backends.key, "sk-panel-secret-0123456789")
    assert window.save_button.isEnabled()
    window.save()
    assert keyring.get_password("anyfill", "codestral") == "sk-panel-secret-0123456789"
    assert "sk-panel-secret" not in config.read_text()
    assert config.read_text() == USER_FILE
    assert backends.key.text() == ""
    assert backends.key_status.text() == "a key is stored in the system keyring"
    assert backends.forget.isEnabled()


def test_bad_values_are_named_next_to_their_field_and_save_stays_off(
    qtbot: QtBot, config: Path
) -> None:
    window = open_window(qtbot, config)
    window.show()
    backends = page(window, BackendsPage)
    assert isinstance(backends, BackendsPage)
    backends.list.setCurrentRow(0)
    retype(qtbot, backends.url, "localhost 8080")
    url_row = next(row for row in backends.form.rows if row.key == ("url",))
    assert url_row.error.isVisible()
    assert url_row.error.text().startswith("not a web address: write it like http://127.0.0.1:8080")
    assert not window.save_button.isEnabled()

    limit = next(row for row in backends.form.rows if row.key == ("limits", "requests_per_minute"))
    limit.editor.setValue(-1)  # type: ignore[attr-defined]
    assert limit.error.text() == "must be at least 0; found -1"
    # Named as the user finds it (page, backend, field); the file's key is in the tooltip.
    assert window.problem.text().startswith("Backends › local › URL: not a web address")
    assert window.problem.text().endswith("(and 1 more)")
    assert window.problem.toolTip() == "In the file: backends[0].url"
    # Ctrl+S does nothing while a field is wrong; the file is untouched.
    qtbot.keyClick(window, Qt.Key.Key_S, Qt.KeyboardModifier.ControlModifier)
    assert config.read_text() == USER_FILE

    retype(qtbot, backends.url, "http://127.0.0.1:8080")
    limit.editor.setValue(0)  # type: ignore[attr-defined]
    assert not url_row.error.isVisible()
    assert window.problem.text() == ""
    assert not window.save_button.isEnabled()  # back to what the file says


def test_a_preset_backend_added_and_renamed_keeps_routing_and_the_file_valid(
    qtbot: QtBot, config: Path
) -> None:
    window = open_window(qtbot, config)
    backends = page(window, BackendsPage)
    assert isinstance(backends, BackendsPage)
    backends.add(PRESETS[1])  # Ollama
    retype(qtbot, backends.name, "ollama-gpu")
    backends.list.setCurrentRow(0)
    retype(qtbot, backends.name, "desk")
    backends.move_selected(+1)
    assert window.draft.data["routing"]["default"] == ["codestral", "desk", "ollama-gpu"]
    assert window.save()
    saved = parse_settings(config.read_text(), environ={})
    assert [b.name for b in saved.backends] == ["codestral", "desk", "ollama-gpu"]
    assert saved.routing.default == ["codestral", "desk", "ollama-gpu"]
    assert 'name = "desk"   # the box under my desk' in config.read_text()
    assert "# local first" in config.read_text()


def test_window_size_and_last_page_are_remembered(qtbot: QtBot, config: Path) -> None:
    window = open_window(qtbot, config)
    window.show()
    window.resize(760, 540)
    page(window, CapturePage)
    window.close()
    again = open_window(qtbot, config)
    assert isinstance(again.stack.currentWidget(), CapturePage)
    assert (again.width(), again.height()) == (760, 540)


def test_pages_are_reachable_with_the_keyboard(qtbot: QtBot, config: Path) -> None:
    window = open_window(qtbot, config)
    window.show()
    window.activateWindow()
    qtbot.waitActive(window)
    window.nav.setFocus()
    window.nav.setCurrentRow(0)
    for expected in (RoutingPage, HotkeysPage, CapturePage, AppsPage):
        qtbot.keyClick(window.nav, Qt.Key.Key_Down)
        assert isinstance(window.stack.currentWidget(), expected)
    # Tab leaves the page list for the page's first field.
    qtbot.keyClick(window.nav, Qt.Key.Key_Tab)
    focus = window.focusWidget()
    assert focus is not None
    assert window.stack.currentWidget().isAncestorOf(focus)


@pytest.fixture
def panel_bridge(qtbot: QtBot, config: Path) -> Iterator[CoreBridge]:
    bridge = CoreBridge(load_for_editing(config), runner=panel_core)
    bridge.start()
    qtbot.waitUntil(lambda: bridge.running, timeout=5000)
    yield bridge
    assert bridge.stop()


@pytest.fixture
def llama() -> Iterator[LoopbackServer]:
    with LoopbackServer.in_thread(LlamaCpp(default=Reply(text="a + b"))) as server:
        yield server


def test_test_shows_the_answer_latency_and_mode(
    qtbot: QtBot, config: Path, panel_bridge: CoreBridge, llama: LoopbackServer
) -> None:
    window = open_window(qtbot, config, panel_bridge)
    backends = page(window, BackendsPage)
    assert isinstance(backends, BackendsPage)
    backends.list.setCurrentRow(0)
    retype(qtbot, backends.url, llama.url)
    qtbot.mouseClick(backends.test, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: backends.result.text().startswith(("✓", "✗")), timeout=10000)
    text = backends.result.text()
    assert text.startswith("✓ 'a + b' in "), text
    assert " ms, native FIM" in text
    assert [r.path for r in llama.requests if r.path == "/infill"] == ["/infill"]
    assert config.read_text() == USER_FILE  # testing saves nothing


def test_test_against_a_dead_port_says_nothing_listens(
    qtbot: QtBot, config: Path, panel_bridge: CoreBridge, refused_url: str
) -> None:
    window = open_window(qtbot, config, panel_bridge)
    backends = page(window, BackendsPage)
    assert isinstance(backends, BackendsPage)
    backends.list.setCurrentRow(0)
    retype(qtbot, backends.url, refused_url)
    qtbot.mouseClick(backends.test, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: backends.result.text().startswith(("✓", "✗")), timeout=10000)
    origin = refused_url.removeprefix("http://")
    assert f"nothing listens on {origin}" in backends.result.text() or (
        f"nothing listens on {refused_url}" in backends.result.text()
    ), backends.result.text()
    assert backends.test.isEnabled()


@pytest.fixture
def refused_url() -> str:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.mark.llamacpp
def test_test_against_the_real_llama_server_shows_latency_and_mode(
    qtbot: QtBot, config: Path, panel_bridge: CoreBridge
) -> None:
    from tests.llm.server import SKIP_REASON, TINY_FIM_MODEL, LlamaServer, find_assets

    assets = find_assets()
    if assets is None:
        pytest.skip(SKIP_REASON)
    window = open_window(qtbot, config, panel_bridge)
    backends = page(window, BackendsPage)
    assert isinstance(backends, BackendsPage)
    backends.list.setCurrentRow(0)
    with LlamaServer(assets / TINY_FIM_MODEL) as server:
        retype(qtbot, backends.url, server.url)
        qtbot.mouseClick(backends.test, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: backends.result.text().startswith(("✓", "✗")), timeout=30000)
    text = backends.result.text()
    # The tiny model has random weights: what it says is noise, how it was asked is not.
    assert text.startswith("✓ "), text
    assert re.search(r" in \d+ ms, native FIM", text), text


def test_test_tries_a_typed_key_before_it_is_saved_and_says_when_none_is_set(
    qtbot: QtBot, config: Path, panel_bridge: CoreBridge, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.servers.mistral import MistralFim

    key = "sk-typed-in-the-panel-0123"
    with LoopbackServer.in_thread(MistralFim(default=Reply(text="a + b"), api_key=key)) as server:
        window = open_window(qtbot, config, panel_bridge)
        backends = page(window, BackendsPage)
        assert isinstance(backends, BackendsPage)
        backends.list.setCurrentRow(1)  # codestral
        retype(qtbot, backends.url, server.url)

        qtbot.mouseClick(backends.test, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: backends.result.text().startswith(("✓", "✗")), timeout=10000)
        assert "needs an API key" in backends.result.text()
        assert "anyfill config set-key codestral" in backends.result.text()

        qtbot.keyClicks(backends.key, key)
        backends.result.setText("")
        qtbot.mouseClick(backends.test, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: backends.result.text().startswith(("✓", "✗")), timeout=10000)
        assert backends.result.text().startswith("✓ 'a + b' in "), backends.result.text()
    assert key not in config.read_text()


def test_test_never_sends_a_typed_key_over_plain_http_to_another_host(
    qtbot: QtBot, config: Path, panel_bridge: CoreBridge
) -> None:
    """The rule `complete` and the daemon keep (issue 24): the Test button keeps it too."""
    from tests.servers.http import non_loopback_address
    from tests.servers.mistral import MistralFim

    host = non_loopback_address()
    if host is None:
        pytest.skip("this machine has no address besides loopback")
    key = "sk-typed-in-the-panel-4567"
    responder = MistralFim(default=Reply(text="a + b"), api_key=key)
    with LoopbackServer.in_thread(responder, host=host) as server:
        window = open_window(qtbot, config, panel_bridge)
        backends = page(window, BackendsPage)
        assert isinstance(backends, BackendsPage)
        backends.list.setCurrentRow(1)  # codestral
        retype(qtbot, backends.url, server.url)
        qtbot.keyClicks(backends.key, key)
        qtbot.mouseClick(backends.test, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: backends.result.text().startswith(("✓", "✗")), timeout=10000)
        text = backends.result.text()
        assert f"would send its API key unencrypted over http:// to {host}" in text, text
        assert "allow_insecure_http" in text
        assert server.requests == []  # nothing at all reached the other host
    assert key not in text


def test_dragging_a_backend_reorders_the_list_and_the_chain(qtbot: QtBot, config: Path) -> None:
    from PySide6.QtCore import QModelIndex

    window = open_window(qtbot, config)
    backends = page(window, BackendsPage)
    assert isinstance(backends, BackendsPage)
    # What a drop does to the list's model: codestral moves above local.
    assert backends.list.model().moveRow(QModelIndex(), 1, QModelIndex(), 0)
    assert [b["name"] for b in window.draft.data["backends"]] == ["codestral", "local"]
    assert window.draft.data["routing"]["default"] == ["codestral", "local"]
    assert window.save()
    assert parse_settings(config.read_text(), environ={}).routing.default == [
        "codestral",
        "local",
    ]
    assert "# the box under my desk" in config.read_text()


def test_a_stored_key_can_be_removed(
    qtbot: QtBot, config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import keyring
    from PySide6.QtWidgets import QMessageBox

    keyring.set_password("anyfill", "codestral", "sk-old-key-0123456789")
    window = open_window(qtbot, config)
    backends = page(window, BackendsPage)
    assert isinstance(backends, BackendsPage)
    backends.list.setCurrentRow(1)
    assert backends.key_status.text() == "a key is stored in the system keyring"
    # The user answers Yes to "Remove the API key of 'codestral' ...?".
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Yes)
    qtbot.mouseClick(backends.forget, Qt.MouseButton.LeftButton)
    assert keyring.get_password("anyfill", "codestral") is None
    assert backends.key_status.text() == "no key stored and $MISTRAL_API_KEY is not set"
    assert not backends.forget.isEnabled()


def test_a_rule_picked_from_a_window_with_a_title_and_its_own_backend_is_saved(
    qtbot: QtBot, config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from PySide6.QtWidgets import QInputDialog

    from anyfill.daemon.x11.probe import WindowInfo

    window = open_window(qtbot, config)
    apps = page(window, AppsPage)
    assert isinstance(apps, AppsPage)
    apps.add(WindowInfo("Firefox", "Navigator", "Inbox - Webmail"))
    assert apps.match.text() == "^Firefox$"
    qtbot.keyClicks(apps.title_edit, "(?i)webmail")
    chain = next(row for row in apps.form.rows if row.key == ("backends",)).editor
    chain.list.item(0).setCheckState(Qt.CheckState.Checked)  # type: ignore[attr-defined]
    assert apps.table.item(0, 2).text() == "backends: local"

    privacy = page(window, PrivacyPage)
    assert isinstance(privacy, PrivacyPage)
    monkeypatch.setattr(QInputDialog, "getText", lambda *a, **k: ("(?i)^signal$", True))
    privacy.add()
    denied = [privacy.denylist.item(i).text() for i in range(privacy.denylist.count())]
    assert denied[0] == "(?i)^signal$"
    assert "keepassxc" in denied[1]  # the default rule for password managers
    assert window.save()
    rules = parse_settings(config.read_text(), environ={}).insert.apps
    assert [(r.match, r.title, r.disabled, r.backends) for r in rules[:2]] == [
        ("(?i)^signal$", "", True, None),
        ("^Firefox$", "(?i)webmail", False, ["local"]),
    ]
    # The file never listed rules: the defaults are written after the new ones.
    assert [r.disabled for r in rules[2:]] == [False, True]


def test_a_renamed_backend_keeps_its_stored_key(qtbot: QtBot, config: Path) -> None:
    import keyring

    keyring.set_password("anyfill", "codestral", "sk-kept-0123456789")
    window = open_window(qtbot, config)
    backends = page(window, BackendsPage)
    assert isinstance(backends, BackendsPage)
    backends.list.setCurrentRow(1)
    retype(qtbot, backends.name, "mistral")
    assert window.save()
    assert keyring.get_password("anyfill", "mistral") == "sk-kept-0123456789"
    assert keyring.get_password("anyfill", "codestral") is None
    assert 'name = "mistral"' in config.read_text()


@pytest.fixture
def running_daemon() -> Iterator[None]:
    """Something answering ``ping`` on this user's control socket, as a daemon does."""
    from anyfill.daemon.control.commands import Commands
    from anyfill.daemon.control.server import ControlServer

    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    ready = threading.Event()

    async def serve() -> None:
        commands = Commands()
        commands.register("ping", lambda args: {"commands": commands.summaries()})
        async with ControlServer(commands) as server:
            await server.start_serving()
            ready.set()
            await stop.wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),))
    thread.start()
    assert ready.wait(10)
    yield
    loop.call_soon_threadsafe(stop.set)
    thread.join(10)
    loop.close()


def test_saving_says_the_running_anyfill_applies_it(
    qtbot: QtBot, config: Path, running_daemon: None
) -> None:
    window = open_window(qtbot, config)
    routing = page(window, RoutingPage)
    assert isinstance(routing, RoutingPage)
    routing.hedge.setValue(300)
    assert window.save()
    assert window.problem.text() == "Saved. The running anyfill applies it at once."


def test_hotkeys_read_as_on_the_desktop_and_are_saved_in_the_files_syntax(
    qtbot: QtBot, config: Path
) -> None:
    window = open_window(qtbot, config)
    hotkeys = page(window, HotkeysPage)
    assert isinstance(hotkeys, HotkeysPage)
    complete, cancel = hotkeys.edits["complete"], hotkeys.edits["cancel"]
    assert complete.text() == "Ctrl+Alt+Space"  # from the file
    assert cancel.text() == "Ctrl+Alt+Backspace"  # the default
    assert complete.toolTip().endswith("\nIn the configuration file: <ctrl>+<alt>+<space>")

    ctrl_alt = Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.AltModifier
    record(qtbot, complete, Qt.Key.Key_J, ctrl_alt)
    assert complete.text() == "Ctrl+Alt+J"
    assert hotkeys.checks["complete"].text().startswith("Ctrl+Alt+J is ")
    assert "<" not in hotkeys.checks["complete"].text()
    capture = page(window, CapturePage)
    assert isinstance(capture, CapturePage)
    paste = next(r for r in capture.forms[1].rows if r.key == ("paste_keys",)).editor
    assert isinstance(paste, HotkeyEdit)
    assert paste.text() == "Ctrl+V"
    ctrl_shift = Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier
    record(qtbot, paste, Qt.Key.Key_Insert, ctrl_shift)
    assert paste.text() == "Ctrl+Shift+Insert"

    assert window.save()
    saved = parse_settings(config.read_text())
    assert saved.hotkeys.complete == "<ctrl>+<alt>+j"
    assert saved.insert.paste_keys == "<ctrl>+<shift>+<insert>"
    window.close()

    reopened = open_window(qtbot, config)
    again = page(reopened, HotkeysPage)
    assert isinstance(again, HotkeysPage)
    assert again.edits["complete"].text() == "Ctrl+Alt+J"


def test_a_problem_is_named_by_page_and_field(qtbot: QtBot, config: Path) -> None:
    window = open_window(qtbot, config)
    routing = page(window, RoutingPage)
    assert isinstance(routing, RoutingPage)
    routing.hedge.setValue(-1)
    assert window.problem.text().startswith("Routing › Hedge after: "), window.problem.text()
    assert window.problem.toolTip() == "In the file: routing.hedge_after_ms"
    routing.hedge.setValue(0)
    apps = page(window, AppsPage)
    assert isinstance(apps, AppsPage)
    apps.add(None)
    retype(qtbot, apps.match, "(unclosed")
    assert window.problem.text().startswith("Applications › rule 1 › Window class: ")


def test_hotkey_labels() -> None:
    assert hotkey_label("<ctrl>+<alt>+<backspace>") == "Ctrl+Alt+Backspace"
    assert hotkey_label("<shift>+<ctrl>+<page_up>") == "Ctrl+Shift+Page Up"
    assert hotkey_label("<ctrl>+<alt>+<f5>") == "Ctrl+Alt+F5"
    assert hotkey_label("<ctrl>++") == "Ctrl+Plus"
    assert hotkey_label("<ctrl>+<nope") == "<ctrl>+<nope"  # shown as written
    assert (
        readable_hotkeys("preview and complete are both <ctrl>+<alt>+<space>; <ctrl>+v too")
        == "preview and complete are both Ctrl+Alt+Space; Ctrl+V too"
    )


def test_one_combination_for_two_actions_is_refused_before_saving(
    qtbot: QtBot, config: Path
) -> None:
    window = open_window(qtbot, config)
    hotkeys = page(window, HotkeysPage)
    assert isinstance(hotkeys, HotkeysPage)
    ctrl_alt = Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.AltModifier
    record(qtbot, hotkeys.edits["preview"], Qt.Key.Key_Space, ctrl_alt)
    assert window.problem.text() == "Hotkeys: preview and complete are both Ctrl+Alt+Space"
    assert not window.save_button.isEnabled()
    nav = window.nav.item(window.pages.index(hotkeys))
    assert nav.foreground().color() == Qt.GlobalColor.red


def test_a_disabled_backend_leaves_the_chain_and_rejoins_at_its_place(
    qtbot: QtBot, config: Path
) -> None:
    window = open_window(qtbot, config)
    backends = page(window, BackendsPage)
    assert isinstance(backends, BackendsPage)
    backends.list.item(0).setCheckState(Qt.CheckState.Unchecked)  # local
    assert window.draft.data["routing"]["default"] == ["codestral"]
    assert window.save()
    saved = parse_settings(config.read_text(), environ={})
    assert (saved.backends[0].enabled, saved.routing.default) == (False, ["codestral"])
    backends.list.item(0).setCheckState(Qt.CheckState.Checked)
    assert window.draft.data["routing"]["default"] == ["local", "codestral"]


def test_a_file_changed_by_another_program_meanwhile_is_not_overwritten_unasked(
    qtbot: QtBot, config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from PySide6.QtWidgets import QMessageBox

    from anyfill.ui.settings.draft import ChangedOnDisk

    window = open_window(qtbot, config)
    routing = page(window, RoutingPage)
    assert isinstance(routing, RoutingPage)
    routing.hedge.setValue(300)
    # Meanwhile, in a text editor: a new backend first, and a comment.
    edited = USER_FILE.replace(
        "# my anyfill settings: keep these comments\n",
        "# my anyfill settings: keep these comments\n# edited in vim\n"
        '[[backends]]\nname = "vim"\ntype = "ollama"\nurl = "http://127.0.0.1:11434"\n\n',
    )
    config.write_text(edited)
    with pytest.raises(ChangedOnDisk):
        window.draft.save()
    assert config.read_text() == edited

    # The user chooses Cancel: nothing is written, the edits here stay.
    monkeypatch.setattr(QMessageBox, "exec", lambda self: 0)
    monkeypatch.setattr(QMessageBox, "clickedButton", lambda self: None)
    assert not window.save()
    assert config.read_text() == edited
    assert window.draft.dirty

    # Then Save over it: the panel's settings win, the editor's table and comment stay whole.
    saved = window.draft.save(overwrite=True)
    text = config.read_text()
    assert "# edited in vim" in text
    assert "hedge_after_ms = 300" in text
    assert [b.name for b in saved.backends] == ["local", "codestral"]
    assert 'name = "local"   # the box under my desk' in text


def test_each_type_shows_only_its_fields(qtbot: QtBot, config: Path) -> None:
    window = open_window(qtbot, config)
    window.show()
    backends = page(window, BackendsPage)
    assert isinstance(backends, BackendsPage)

    def shown(key: tuple[str, ...]) -> bool:
        row = next(r for r in backends.form.rows if r.key == key)
        return row.editor.isVisibleTo(backends.form)

    backends.list.setCurrentRow(0)  # llamacpp: a raw-prompt server, free
    assert shown(("template",))
    assert not shown(("price", "input_per_mtok"))
    backends.list.setCurrentRow(1)  # codestral: native FIM, paid
    assert not shown(("template",))
    assert shown(("price", "input_per_mtok"))
    backends.add(next(p for p in PRESETS if p.type == "llamacpp-managed"))
    assert not shown(("url",))
    assert not shown(("key_env",))
    assert shown(("server", "context_size"))
    backends.apply_preset(PRESETS[0])  # back to a server of the user's own
    assert shown(("url",))
    assert not shown(("server", "context_size"))


def test_the_context_page_shows_what_is_sent_and_saves_the_clipboard_switch(
    qtbot: QtBot, config: Path
) -> None:
    window = open_window(qtbot, config)
    window.show()
    context = page(window, ContextPage)
    assert isinstance(context, ContextPage)
    shown = context.sent.text()
    assert "window title (not for terminals)" in shown
    assert "clipboard" not in shown  # off until turned on
    assert "Never for password managers" in shown
    names = [b.name for b in window.draft.settings().backends if b.enabled]
    assert all(f"• {name}:" in shown for name in names)
    clipboard = next(row.editor for row in context.form.rows if "clipboard" in row.key)
    clipboard.click()
    assert "recent clipboard text" in context.sent.text()
    qtbot.mouseClick(window.save_button, Qt.MouseButton.LeftButton)
    assert "clipboard = true" in config.read_text()
    assert "[context]" in config.read_text()


@pytest.fixture
def dialogs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """The error dialogs the window opened, (title, text), instead of blocking on them."""
    from PySide6.QtWidgets import QMessageBox

    shown: list[tuple[str, str]] = []
    monkeypatch.setattr(
        QMessageBox, "critical", lambda parent, title, text, *a, **k: shown.append((title, text))
    )
    return shown


def fill(mount: Path) -> None:
    with contextlib.suppress(OSError), (mount / "filler").open("wb", buffering=0) as filler:
        while True:
            filler.write(bytes(4096))


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A real tmpfs with no space left (mounted as root; skipped otherwise)."""
    import os
    import subprocess

    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "full"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], check=True)
    try:
        fill(mount)
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def change_first_url(qtbot: QtBot, window: SettingsWindow) -> BackendsPage:
    backends = page(window, BackendsPage)
    assert isinstance(backends, BackendsPage)
    backends.list.setCurrentRow(0)
    retype(qtbot, backends.url, "http://127.0.0.1:8081")
    return backends


def test_a_symlinked_config_is_written_through_the_link_and_keeps_its_mode(
    qtbot: QtBot, tmp_path: Path, dialogs: list[tuple[str, str]]
) -> None:
    """Issue 24: the link was replaced by a regular file of mode 0600."""
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    target = dotfiles / "anyfill.toml"
    target.write_text(USER_FILE)
    target.chmod(0o644)
    link = tmp_path / "config.toml"
    link.symlink_to(target)
    window = open_window(qtbot, link)
    change_first_url(qtbot, window)
    assert window.save(), dialogs
    assert link.is_symlink()
    assert link.readlink() == target
    assert 'url = "http://127.0.0.1:8081"' in target.read_text()
    assert target.stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in dotfiles.iterdir()) == ["anyfill.toml"]  # no temp file left
    assert dialogs == []


def test_a_refused_keyring_write_leaves_the_file_as_it_was_and_says_so(
    qtbot: QtBot, config: Path, dialogs: list[tuple[str, str]], file_keyring: object
) -> None:
    """Issue 24: the file was written, then 'Not saved', then 'another program changed it'."""
    import keyring
    import keyring.backends.fail

    window = open_window(qtbot, config)
    backends = change_first_url(qtbot, window)
    backends.list.setCurrentRow(1)  # codestral
    qtbot.keyClicks(backends.key, "sk-refused-0123456789")
    keyring.set_keyring(keyring.backends.fail.Keyring())
    try:
        assert not window.save()
    finally:
        keyring.set_keyring(file_keyring)
    ((title, text),) = dialogs
    assert title == "Not saved"
    assert "the system keyring refused the key" in text
    assert "nothing was changed" in text
    assert config.read_text() == USER_FILE
    # The keyring works again: the same Save goes through, no "another program changed it".
    assert window.save()
    assert len(dialogs) == 1
    assert keyring.get_password("anyfill", "codestral") == "sk-refused-0123456789"
    assert 'url = "http://127.0.0.1:8081"' in config.read_text()


def test_a_keyring_on_a_full_disk_shows_a_message(
    qtbot: QtBot, config: Path, dialogs: list[tuple[str, str]], full_disk: Path
) -> None:
    import keyring
    from keyrings.alt.file import PlaintextKeyring

    class FullDiskKeyring(PlaintextKeyring):  # type: ignore[misc]
        @property
        def file_path(self) -> str:
            return str(full_disk / "keyring_pass.cfg")

    window = open_window(qtbot, config)
    backends = page(window, BackendsPage)
    assert isinstance(backends, BackendsPage)
    backends.list.setCurrentRow(1)  # codestral
    qtbot.keyClicks(backends.key, "sk-no-space-0123456789")
    previous = keyring.get_keyring()
    keyring.set_keyring(FullDiskKeyring())
    try:
        assert not window.save()
    finally:
        keyring.set_keyring(previous)
    ((title, text),) = dialogs
    assert title == "Not saved"
    assert "No space left on device" in text, text
    assert "sk-no-space" not in text
    assert config.read_text() == USER_FILE


def test_a_config_on_a_full_disk_says_what_was_kept(
    qtbot: QtBot, full_disk: Path, dialogs: list[tuple[str, str]]
) -> None:
    import subprocess

    import keyring

    path = full_disk / "config.toml"
    subprocess.run(["umount", "-l", str(full_disk)], check=True)  # room for the file first
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(full_disk)], check=True)
    path.write_text(USER_FILE)
    fill(full_disk)
    window = open_window(qtbot, path)
    backends = change_first_url(qtbot, window)
    backends.list.setCurrentRow(1)
    qtbot.keyClicks(backends.key, "sk-kept-in-keyring-0123")
    assert not window.save()
    ((title, text),) = dialogs
    assert title == "Not saved"
    assert "No space left on device" in text, text
    assert "the file is unchanged; the API key for 'codestral' is in the keyring" in text
    assert path.read_text() == USER_FILE
    assert keyring.get_password("anyfill", "codestral") == "sk-kept-in-keyring-0123"


def test_a_backend_added_goes_before_the_managed_fallback_and_the_order_is_shown(
    qtbot: QtBot, tmp_path: Path
) -> None:
    """With the default file (llamacpp, ollama, managed) an added backend landed after
    'managed', so it was never asked while the managed server worked, and nothing said so."""
    from anyfill.config.store import default_config_text

    path = tmp_path / "config.toml"
    path.write_text(default_config_text())
    window = open_window(qtbot, path)
    backends = page(window, BackendsPage)
    assert isinstance(backends, BackendsPage)
    assert "Completions ask: <b>llamacpp → ollama → managed</b>" in backends.order.text()
    assert "answers only when the ones before it do not" in backends.order.text()
    backends.add(next(p for p in PRESETS if p.type == "mistral-fim"))
    added = window.draft.data["backends"][backends.index]["name"]
    chain = ["llamacpp", "ollama", added, "managed"]
    assert window.draft.data["routing"]["default"] == chain
    assert backends.list.item(2).text().startswith(added)
    assert f"ollama → {added} → managed" in backends.order.text()
    # moved first, the panel says what that means
    backends.list.setCurrentRow(3)
    for _ in range(3):
        backends.move_selected(-1)
    assert window.draft.effective_chain()[0] == "managed"
    assert "while it works, the backends after it are never asked" in backends.order.text()
    for _ in range(3):
        backends.move_selected(+1)
    assert window.draft.effective_chain() == chain
    assert window.save()
    saved = parse_settings(path.read_text(), environ={})
    assert saved.routing.default[-1] == "managed"
    assert saved.routing.default.index(added) < saved.routing.default.index("managed")


def _all_pages(window: SettingsWindow) -> Iterator[tuple[object, object]]:
    from anyfill.ui.settings.fields import Form

    for index, candidate in enumerate(window.pages):
        window.nav.setCurrentRow(index)
        for form in candidate.findChildren(Form):
            yield candidate, form


def test_every_option_has_a_tooltip_in_words_a_user_knows(qtbot: QtBot, config: Path) -> None:
    """Capture's "Decide nothing is selected after 60 ms" and most options had none."""
    window = open_window(qtbot, config)
    page(window, AppsPage).add(None)  # type: ignore[attr-defined]
    missing = []
    rows = 0
    for shown, form in _all_pages(window):
        for row in form.rows:  # type: ignore[attr-defined]
            rows += 1
            tip = row.editor.toolTip()
            if len(tip) < 20 or "_" in tip.split(":")[0]:
                missing.append((type(shown).__name__, row.key, tip))
            if row.label is not None:
                assert tip.startswith(row.label.toolTip())
    assert rows > 60
    assert missing == []
    capture = page(window, CapturePage)
    empty = next(r for f in capture.forms for r in f.rows if r.key == ("empty_timeout_ms",))  # type: ignore[attr-defined]
    assert empty.label.text() == "Nothing selected: stop waiting after"
    assert "nothing gets selected" in empty.editor.toolTip()


def test_no_choice_is_cut_at_the_windows_size(qtbot: QtBot, config: Path) -> None:
    from PySide6.QtWidgets import QComboBox, QStyle, QStyleOptionComboBox

    window = open_window(qtbot, config)
    window.show()
    backends = page(window, BackendsPage)
    assert isinstance(backends, BackendsPage)
    backends.add(next(p for p in PRESETS if p.type == "llamacpp-managed"))  # its choices show
    cut = []
    for index, shown in enumerate(window.pages):
        window.nav.setCurrentRow(index)
        qtbot.wait(10)
        for combo in shown.findChildren(QComboBox):
            if not combo.isVisibleTo(shown):
                continue
            option = QStyleOptionComboBox()
            combo.initStyleOption(option)
            field = combo.style().subControlRect(
                QStyle.ComplexControl.CC_ComboBox,
                option,
                QStyle.SubControl.SC_ComboBoxEditField,
                combo,
            )
            for item in range(combo.count()):
                text = combo.itemText(item)
                if combo.fontMetrics().horizontalAdvance(text) > field.width():
                    cut.append((type(shown).__name__, text, field.width()))
    assert cut == []
    # and no field runs past the right edge of the Backends form's scroll area
    window.nav.setCurrentRow(0)
    qtbot.wait(10)
    viewport = backends.form.parentWidget()
    assert viewport is not None
    assert backends.form.minimumSizeHint().width() <= viewport.width()


def test_keys_read_alike_on_every_page_and_the_accept_keys_are_recorded(
    qtbot: QtBot, config: Path
) -> None:
    """Applications showed `paste <ctrl>+<shift>+v` while Hotkeys showed `Ctrl+Shift+V`; the
    popup's accept keys were a raw text field."""
    from anyfill.ui.settings.fields import KeyListEdit

    window = open_window(qtbot, config)
    apps = page(window, AppsPage)
    assert isinstance(apps, AppsPage)
    texts = [apps.table.item(row, 2).text() for row in range(apps.table.rowCount())]
    terminal = "capture: clipboard; paste with Ctrl+Shift+V; copy with Ctrl+Shift+C"
    terminal += "; suggestions off"
    assert terminal in texts
    assert not any("<" in text for text in texts)

    hotkeys = page(window, HotkeysPage)
    assert isinstance(hotkeys, HotkeysPage)
    accept = hotkeys.findChild(KeyListEdit)
    assert isinstance(accept, KeyListEdit)
    assert [button.text() for button in accept.buttons] == ["Tab", "Enter"]
    record(qtbot, accept.add_button, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    assert [button.text() for button in accept.buttons] == ["Tab", "Enter", "Ctrl+Enter"]
    remove_tab = next(
        w for w in accept.findChildren(QPushButton) if w.accessibleName() == "Remove Tab"
    )
    qtbot.mouseClick(remove_tab, Qt.MouseButton.LeftButton)
    assert [button.text() for button in accept.buttons] == ["Enter", "Ctrl+Enter"]
    assert window.save()
    saved = parse_settings(config.read_text(), environ={})
    assert saved.ui.preview_accept_keys == ["<enter>", "<ctrl>+<enter>"]
