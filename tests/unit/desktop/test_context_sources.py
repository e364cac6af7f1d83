"""Context beyond the caret: the chunk ring, which sources apply, and what a press sends."""

from __future__ import annotations

from anyfill.config.model import AppRule, ContextConfig, InsertConfig, Settings
from anyfill.daemon.context import Context
from anyfill.daemon.desktop.context_ring import ChunkRing, line_similarity
from anyfill.daemon.desktop.context_sources import (
    ContextMemory,
    Sources,
    looks_secret,
    resolve_sources,
    with_context,
)
from anyfill.daemon.desktop.ports import Target

EDITOR = Target(window_id=1, app="Mousepad", process="mousepad", title="notes.txt - Mousepad")
TERMINAL = Target(window_id=2, app="XTerm", process="xterm", title="ssh root@db.internal")
VAULT = Target(window_id=3, app="KeePassXC", process="keepassxc", title="Passwords.kdbx")


def lines(n: int, tag: str) -> str:
    return "\n".join(f"{tag} line {i}" for i in range(n))


def test_the_ring_keeps_the_newest_16_chunks_of_at_most_64_lines() -> None:
    ring = ChunkRing()
    for n in range(20):
        ring.add(f"c{n}", lines(100, f"chunk{n}"))
    names = [chunk.name for chunk in ring.chunks()]
    assert names == [f"c{n}" for n in range(4, 20)]
    assert all(len(chunk.text.split("\n")) == 64 for chunk in ring.chunks())
    assert ring.chunks()[-1].text.endswith("chunk19 line 99")  # the end is kept


def test_a_near_duplicate_replaces_the_chunk_it_repeats() -> None:
    ring = ChunkRing()
    ring.add("a", lines(20, "x"))
    ring.add("b", lines(20, "y"))
    ring.add("a2", lines(20, "x") + "\none more")  # 20 of 21 lines the same: an edit
    assert [chunk.name for chunk in ring.chunks()] == ["b", "a2"]


def test_line_similarity_counts_shared_lines() -> None:
    assert line_similarity("a\nb", "a\nb") == 1.0
    assert line_similarity("a\nb", "c\nd") == 0.0
    assert line_similarity("a\nb\nc\nd", "a\nb") == 2 * 2 / 6


def test_chunks_like_the_text_at_the_caret_and_over_the_budget_are_not_sent() -> None:
    ring = ChunkRing()
    ring.add("old", "o" * 50)
    ring.add("local", lines(10, "here"))
    ring.add("new", "n" * 50)
    chosen = ring.select(local=lines(10, "here"), budget=120)
    assert [chunk.name for chunk in chosen] == ["old", "new"]
    assert [chunk.name for chunk in ring.select(local="", budget=60)] == ["new"]


def test_password_managers_get_nothing_and_terminals_no_title() -> None:
    on = Settings(context=ContextConfig(clipboard=True))
    assert resolve_sources(VAULT, on) == Sources()
    assert resolve_sources(EDITOR, on, secure=True) == Sources()
    terminal = resolve_sources(TERMINAL, on)
    assert not terminal.title
    assert terminal.accepted
    assert resolve_sources(EDITOR, on) == Sources(True, True, True, True)


def test_clipboard_only_when_turned_on_and_rules_turn_sources_off() -> None:
    assert not resolve_sources(EDITOR, Settings()).clipboard
    rules = InsertConfig(
        apps=[
            AppRule(match="mousepad", context_title=False, context_clipboard=True),
        ]
    )
    settings = Settings(insert=rules)
    sources = resolve_sources(EDITOR, settings)
    assert (sources.title, sources.fields, sources.clipboard) == (False, True, False)
    assert resolve_sources(EDITOR, Settings(context=ContextConfig(enabled=False))) == Sources()


def test_one_word_clipboard_text_reads_as_a_secret() -> None:
    assert looks_secret("hunter2-Xy9!")
    assert not looks_secret("Meet me on Monday")
    memory = ContextMemory(ContextConfig(clipboard=True))
    memory.remember_clipboard("s3cr3t-t0ken")
    memory.remember_clipboard("Agenda: budget, hiring")
    assert [chunk.text for chunk in memory.clipboard()] == ["Agenda: budget, hiring"]


def test_a_press_gets_named_chunks_and_the_window_as_its_file_name() -> None:
    memory = ContextMemory(ContextConfig())
    memory.remember_accepted(EDITOR, "Dear team,\nthe launch is ", "on Friday.")
    context = Context(
        prefix="Hello ", suffix="", app="Mousepad", fields=(("Subject", "Launch plan"),)
    )
    sent = with_context(context, EDITOR, Sources(True, True, True, False), memory)
    window = "Mousepad: notes.txt - Mousepad"
    assert sent.extra == (
        (f"{window} (accepted)", "the launch is on Friday."),
        (f"{window} - Subject", "Launch plan"),
    )
    assert sent.filename == window
    assert sent.fields == ()
    # Without the title source the names say only what each chunk is.
    plain = with_context(context, EDITOR, Sources(False, True, False, False), memory)
    assert plain.extra == (("Subject", "Launch plan"),)
    assert plain.filename == ""


def test_accepted_completions_stay_with_their_app() -> None:
    memory = ContextMemory(ContextConfig())
    memory.remember_accepted(EDITOR, "", "editor text")
    assert memory.accepted(TERMINAL) == ()
    assert [chunk.text for chunk in memory.accepted(EDITOR)] == ["editor text"]
