"""A ring of context chunks, after llama.vscode's (``ring_n_chunks`` 16, ``ring_chunk_size``
64 lines): the newest chunks of related text, near-duplicates evicted by line similarity.

A chunk that is more than 90 % the same lines as one already held replaces it (the text was
edited, not new); before each request, chunks more than half the same lines as the text
around the caret are left out (the model would only repeat them), and the newest chunks that
fit the character budget are sent, oldest first so the freshest stand nearest the caret.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

__all__ = ["Chunk", "ChunkRing", "line_similarity"]

DUPLICATE = 0.9
"""Line similarity above which a new chunk replaces the held one (llama.vim: 0.9)."""
LOCAL = 0.5
"""Line similarity to the text around the caret above which a chunk is not sent (0.5)."""


@dataclass(frozen=True)
class Chunk:
    name: str
    """Where it came from, sent as the chunk's file name (llama.cpp ``filename``)."""
    text: str


def line_similarity(a: str, b: str) -> float:
    """llama.vim's ``chunk_sim``: twice the lines both hold over all their lines (0..1)."""
    left, right = a.split("\n"), b.split("\n")
    if not left or not right:
        return 0.0
    pool = list(right)
    common = 0
    for line in left:
        if line in pool:
            pool.remove(line)
            common += 1
    return 2 * common / (len(left) + len(right))


class ChunkRing:
    def __init__(self, max_chunks: int = 16, chunk_lines: int = 64) -> None:
        self.max_chunks = max_chunks
        self.chunk_lines = chunk_lines
        self._chunks: deque[Chunk] = deque()

    def __len__(self) -> int:
        return len(self._chunks)

    def add(self, name: str, text: str) -> None:
        """Keep ``text`` (its last ``chunk_lines`` lines) as the newest chunk."""
        text = "\n".join(text.split("\n")[-self.chunk_lines :])
        if not text.strip():
            return
        chunk = Chunk(name, text)
        self._chunks = deque(
            held for held in self._chunks if line_similarity(held.text, text) <= DUPLICATE
        )
        self._chunks.append(chunk)
        while len(self._chunks) > self.max_chunks:
            self._chunks.popleft()

    def chunks(self) -> tuple[Chunk, ...]:
        return tuple(self._chunks)

    def select(self, local: str, budget: int) -> tuple[Chunk, ...]:
        """The chunks to send with a request whose text around the caret is ``local``: not
        too like it, newest first within ``budget`` characters, returned oldest first."""
        chosen: list[Chunk] = []
        used = 0
        for chunk in reversed(self._chunks):
            if line_similarity(chunk.text, local) > LOCAL:
                continue
            cost = len(chunk.name) + len(chunk.text)
            if used + cost > budget:
                continue
            chosen.append(chunk)
            used += cost
        return tuple(reversed(chosen))
