"""Line and server-sent-event splitting of streamed bodies, whatever the network reads."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator, Sequence

import httpx
from hypothesis import given, settings
from hypothesis import strategies as st

from anyfill.daemon.backends.wire import SseEvent, iter_line_batches, iter_sse_batches


class Reads(httpx.AsyncByteStream):
    """A body that arrives in exactly these reads."""

    def __init__(self, reads: Sequence[bytes]) -> None:
        self.reads = list(reads)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for read in self.reads:
            yield read


def response(reads: Sequence[bytes], headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(
        200,
        headers=headers or {"content-type": "text/event-stream"},
        stream=Reads(reads),
        request=httpx.Request("POST", "http://127.0.0.1:1/v1/completions"),
    )


async def batches(reads: Sequence[bytes], headers: dict[str, str] | None = None) -> list[list[str]]:
    return [batch async for batch in iter_line_batches(response(reads, headers))]


def lines_of(reads: Sequence[bytes]) -> list[str]:
    return [line for batch in asyncio.run(batches(reads)) for line in batch]


async def test_a_batch_holds_what_one_read_completed() -> None:
    assert await batches([b"a\nb\nc", b"d\n", b"e"]) == [["a", "b"], ["cd"], ["e"]]


async def test_crlf_split_between_two_reads_is_one_line_end() -> None:
    assert await batches([b"data: 1\r", b"\n\r\ndata: 2\r\n"]) == [
        ["data: 1"],
        ["", "data: 2"],
    ]


async def test_a_lone_cr_ends_a_line() -> None:
    assert await batches([b"a\rb\r\rc\n"]) == [["a", "b", "", "c"]]


async def test_a_character_split_between_reads_is_decoded_whole() -> None:
    encoded = "data: é€😀\n".encode()
    assert await batches([encoded[:8], encoded[8:11], encoded[11:]]) == [["data: é€😀"]]


async def test_a_compressed_body_goes_through_httpx_decoders() -> None:
    body = gzip.compress(b"data: one\n\ndata: two\n\n")
    got = await batches([body[:10], body[10:]], {"content-encoding": "gzip"})
    assert [line for batch in got for line in batch] == ["data: one", "", "data: two", ""]


@settings(max_examples=300)
@given(
    lines=st.lists(
        st.text(st.characters(exclude_characters="\r\n", exclude_categories=["Cs"])),
        max_size=12,
    ),
    ends=st.lists(st.sampled_from(["\n", "\r\n", "\r"]), min_size=12, max_size=12),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8),
)
def test_any_reads_and_line_ends_give_the_same_lines(
    lines: list[str], ends: list[str], cuts: list[int]
) -> None:
    ends = ends[: len(lines)]
    for i in range(len(ends) - 1):
        if ends[i] == "\r" and not lines[i + 1] and ends[i + 1][0] == "\n":
            ends[i] = "\r\n"  # a lone CR then an empty LF line would read as one CRLF
    body = "".join(line + end for line, end in zip(lines, ends, strict=True)).encode()
    points = sorted({min(cut, len(body)) for cut in cuts})
    reads = [body[a:b] for a, b in zip([0, *points], [*points, len(body)], strict=True)]
    assert lines_of([read for read in reads if read]) == lines


async def test_events_of_one_read_come_as_one_batch() -> None:
    reads = [
        b': keep-alive\n\ndata: {"a": 1}\n\nevent: ping\ndata: x\ndata: y\n\n',
        b'error: {"message": "boom"}\n',
        b"data: last",
    ]
    got = [batch async for batch in iter_sse_batches(response(reads), "b")]
    assert got == [
        [SseEvent("message", '{"a": 1}'), SseEvent("ping", "x\ny")],
        [SseEvent("error", '{"message": "boom"}')],
        [SseEvent("message", "last")],
    ]


async def test_the_check_runs_on_every_read() -> None:
    calls: list[int] = []
    reads = [b": keep-alive\n\n"] * 3 + [b"data: 1\n\n"]
    got = [b async for b in iter_sse_batches(response(reads), "b", lambda: calls.append(1))]
    assert got == [[SseEvent("message", "1")]]
    assert len(calls) == 4


async def test_compressed_events_are_parsed_alike() -> None:
    body = gzip.compress(b"data: 1\n\nevent: e\ndata: 2\n\ndata: 3")
    reads = [body[:7], body[7:]]
    got = [
        event
        async for batch in iter_sse_batches(response(reads, {"content-encoding": "gzip"}), "b")
        for event in batch
    ]
    assert got == [SseEvent("message", "1"), SseEvent("e", "2"), SseEvent("message", "3")]
