"""Where a suggestion is not asked for, whatever the pause: the field and the caret."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Field:
    """The focused text field as the accessibility API describes it."""

    before: str
    """The text before the caret (the whole document or a bounded part of it)."""
    after: str
    editable: bool = True
    selection: bool = False
    password: bool = False
    single_line: bool = False


def refusal(field: Field, max_chars_after_caret: int) -> str:
    """Why no suggestion is asked for here ('' when one may be): llama.vscode's rule (more
    than a few characters after the caret on its line: the user edits, not writes on), a
    selection (typing would replace it), or a field that is not editable text."""
    if field.password:
        return "a password field"
    if not field.editable:
        return "not an editable text field"
    if field.selection:
        return "text is selected"
    rest = field.after.split("\n", 1)[0]
    if len(rest.strip()) > max_chars_after_caret:
        return f"{len(rest.strip())} characters follow the caret on its line"
    return ""


def text_follows(field_after: str) -> bool:
    """Text after the caret on its line: the ghost goes below the caret, not over it."""
    return bool(field_after.split("\n", 1)[0].strip())
