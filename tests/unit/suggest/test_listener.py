"""The AT-SPI event and attribute parsing of the suggester's listener (the wire as
at-spi2-core sends it: signature siiva{sv})."""

from __future__ import annotations

from dbus_fast import Message, MessageType, Variant

from anyfill.daemon.desktop.suggest.listener import _bits, _event_of, _points


def signal(member: str, detail: str, one: int, two: int, data: Variant) -> Message:
    return Message(
        message_type=MessageType.SIGNAL,
        path="/org/a11y/atspi/accessible/42",
        interface="org.a11y.atspi.Event.Object",
        member=member,
        signature="siiva{sv}",
        body=[detail, one, two, data, {}],
        sender=":1.7",
    )


def test_an_insert_a_delete_and_a_caret_move() -> None:
    typed = _event_of(signal("TextChanged", "insert", 12, 1, Variant("s", "x")), 99)
    assert typed is not None
    assert (typed.kind, typed.offset, typed.text, typed.pid) == ("insert", 12, "x", 99)
    assert (typed.sender, typed.path) == (":1.7", "/org/a11y/atspi/accessible/42")
    gone = _event_of(signal("TextChanged", "delete:system", 3, 2, Variant("s", "ab")), None)
    assert gone is not None
    assert (gone.kind, gone.offset, gone.pid) == ("delete", 3, 0)
    moved = _event_of(signal("TextCaretMoved", "", 7, 0, Variant("i", 0)), 5)
    assert moved is not None
    assert (moved.kind, moved.offset) == ("caret", 7)


def test_state_bits_and_font_sizes() -> None:
    editable, focused, single_line = 7, 12, 26
    words = [(1 << editable) | (1 << focused) | (1 << single_line), 1 << (33 - 32)]
    assert _bits(words) == {editable, focused, single_line, 33}
    assert _points("12") == 12.0
    assert _points("10pt") == 10.0
    assert _points("16px") == 12.0
    assert _points("big") == 0.0
