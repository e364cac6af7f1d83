"""Runaway repetition: a small model stuck writing the same line (or block) until its token
limit. The first round is the answer; the copies after it are noise."""

from __future__ import annotations

__all__ = ["trim_repetition"]

_MAX_PERIOD = 4
"""Longest repeated block, in lines."""


def _repeats_needed(period: int) -> int:
    # One line five times, or a block of lines four times: rarer than any real text.
    return 5 if period == 1 else 4


def trim_repetition(text: str) -> str:
    """Keep one round of a line or block of lines that the answer repeats to its end.

    The last line may be cut short (the token limit hit mid-line); the repeated block must
    have letters or digits (a run of ``}`` may be real). ``a\\nx\\nx\\nx\\nx\\nx\\nx`` -> ``a\\nx``.
    """
    lines = text.split("\n")
    for period in range(1, _MAX_PERIOD + 1):
        kept = _keep_one_round(lines, period)
        if kept is not None:
            return "\n".join(kept)
    return text


def _keep_one_round(lines: list[str], period: int) -> list[str] | None:
    needed = _repeats_needed(period)
    if len(lines) < period * needed:
        return None
    last = len(lines) - 1
    # Where the repeated block would start if the last line is a cut-short copy.
    for full_end in (len(lines), last):
        partial = lines[full_end:]
        body = lines[:full_end]
        if len(body) < period * needed:
            continue
        block = body[len(body) - period :]
        if not any(char.isalnum() for line in block for char in line):
            continue  # a run of "}" or blank lines may be real
        if partial and not (block[0].startswith(partial[0]) and partial[0] != block[0]):
            continue
        start = len(body) - period
        while start - period >= 0 and body[start - period : start] == block:
            start -= period
        rounds = (len(body) - start) // period
        if rounds < needed:
            continue
        # The first round may begin a few lines earlier than the alignment from the end.
        while start > 0 and body[start - 1] == body[start - 1 + period]:
            start -= 1
        return body[: start + period]
    return None
