"""Read the token strings of a GGUF file (``tokenizer.ggml.tokens``), for checking templates
against real tokenizers. Only the key-value section is parsed; tensors are never touched.

GGUF layout: magic ``GGUF``, u32 version, u64 tensor count, u64 key-value count, then per
key: string key, u32 value type, value (strings are a u64 length plus UTF-8 bytes; arrays
a u32 item type, a u64 count and the items). Little-endian throughout.
"""

from __future__ import annotations

import struct
from typing import IO, Any

_SCALARS = {
    0: "B",
    1: "b",
    2: "H",
    3: "h",
    4: "I",
    5: "i",
    6: "f",
    7: "?",
    10: "Q",
    11: "q",
    12: "d",
}
_STRING = 8
_ARRAY = 9


def _unpack(stream: IO[bytes], fmt: str) -> Any:
    size = struct.calcsize("<" + fmt)
    return struct.unpack("<" + fmt, stream.read(size))[0]


def _string(stream: IO[bytes]) -> str:
    length = _unpack(stream, "Q")
    return stream.read(length).decode("utf-8")


def _value(stream: IO[bytes], kind: int) -> Any:
    if kind in _SCALARS:
        return _unpack(stream, _SCALARS[kind])
    if kind == _STRING:
        return _string(stream)
    if kind == _ARRAY:
        item, count = _unpack(stream, "I"), _unpack(stream, "Q")
        return [_value(stream, item) for _ in range(count)]
    raise ValueError(f"unknown GGUF value type {kind}")


def gguf_tokens(stream: IO[bytes]) -> list[str]:
    """The vocabulary of the GGUF file open in ``stream``."""
    if stream.read(4) != b"GGUF":
        raise ValueError("not a GGUF file")
    _version, _tensors, count = _unpack(stream, "I"), _unpack(stream, "Q"), _unpack(stream, "Q")
    for _ in range(count):
        key, kind = _string(stream), _unpack(stream, "I")
        value = _value(stream, kind)
        if key == "tokenizer.ggml.tokens":
            return [str(token) for token in value]
    raise ValueError("no tokenizer.ggml.tokens in the file")
