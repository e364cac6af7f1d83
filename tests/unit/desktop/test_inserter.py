"""The inserter with the desktop ports faked at their edge: type when the layout can, else
paste (the user's clipboard back afterwards)."""

from __future__ import annotations

from anyfill.config.model import InsertConfig
from anyfill.daemon.desktop.apprules import AppSettings
from anyfill.daemon.desktop.inject.inserter import Inserter
from anyfill.daemon.desktop.ports import Target
from tests.unit.desktop.fakes import fake_desktop

EDITOR = Target(window_id=0x100, app="Mousepad", instance="mousepad", process="mousepad")
TYPE_MODE = AppSettings(
    disabled=False,
    mode="type",
    capture=("keyboard",),
    paste_keys="<ctrl>+v",
    copy_keys="<ctrl>+c",
    backends=(),
    rule="mousepad",
)


async def test_type_mode_types_what_the_layout_has_keys_for() -> None:
    desktop, keys, clipboard, _ = fake_desktop(EDITOR)

    method = await Inserter(desktop, InsertConfig()).insert(
        "x = 1", EDITOR, TYPE_MODE, selection_was_theirs=False
    )

    assert method.method == "type"
    assert (keys.typed, keys.pasted) == (["x = 1"], [])
    assert clipboard.data["clipboard"].text() == "user clipboard"


async def test_text_the_layout_cannot_type_is_pasted_instead() -> None:
    desktop, keys, clipboard, _ = fake_desktop(EDITOR)
    keys.layout_lacks = {"~"}

    method = await Inserter(desktop, InsertConfig()).insert(
        "a ~ b", EDITOR, TYPE_MODE, selection_was_theirs=False
    )

    assert method.method == "paste"
    assert (keys.typed, keys.pasted) == ([], ["a ~ b"])
    assert clipboard.data["clipboard"].text() == "user clipboard"
