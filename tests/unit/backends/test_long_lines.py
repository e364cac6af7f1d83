"""A stream's line splitter: bounded lines, refused bad bytes, and work proportional to the
input (each read's bytes are scanned once; a long line's pieces are joined once)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from anyfill.daemon.backends.wire import MAX_LINE_BYTES, LineSplitter, StreamTextError

READ = 64 * 1024


def test_a_line_just_under_the_bound_arrives_whole_from_many_reads() -> None:
    line = b"x" * (MAX_LINE_BYTES - 10)
    splitter = LineSplitter()
    got: list[str] = []
    for i in range(0, len(line), READ):
        got += splitter.feed(line[i : i + READ])
    got += splitter.feed(b"\ndata: next\n")
    assert [len(text) for text in got] == [len(line), len("data: next")]


def test_a_64_mb_line_is_refused_once_it_passes_the_bound() -> None:
    splitter = LineSplitter()
    fed = [0]

    def feed_64_mb() -> None:
        while fed[0] < 64 * 2**20:
            splitter.feed(b"y" * READ)
            fed[0] += READ

    with pytest.raises(StreamTextError, match="longer than 8 MiB"):
        feed_64_mb()
    assert fed[0] <= MAX_LINE_BYTES + READ  # it stopped at the bound, not at the end


def test_bytes_that_are_not_utf8_are_refused() -> None:
    with pytest.raises(StreamTextError, match="not valid UTF-8"):
        LineSplitter().feed(b'data: {"content": "caf\xc3"}\n')


def test_pending_pieces_are_joined_once_per_line() -> None:
    """The pending part of a line is kept as pieces: one join when the line ends (the old
    splitter copied the whole pending buffer on every read, quadratic in the line)."""
    splitter = LineSplitter()
    for _ in range(1000):
        assert splitter.feed(b"z" * 100) == []
    assert len(splitter._pending) == 1000  # pieces, not one growing copy
    assert splitter.feed(b"\n") == ["z" * 100_000]
    assert splitter._pending == []


@given(st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\xff", b"")), max_size=30))
def test_any_split_of_ascii_lines_gives_the_same_lines(pieces: list[bytes]) -> None:
    body = b"".join(piece.decode("latin-1").encode("ascii", "replace") for piece in pieces)
    expected = body.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
    splitter = LineSplitter()
    got: list[str] = []
    for i in range(0, len(body), 7):
        got += splitter.feed(body[i : i + 7])
    got += splitter.flush()
    want = [line.decode() for line in expected[:-1]] + (
        [expected[-1].decode()] if expected[-1] else []
    )
    assert got == want
