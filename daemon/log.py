"""Logging set-up: a rotating file in the user log dir and a filter that keeps secrets out.

Captured text never reaches a log record unless the user opted in: code wraps it in
:class:`Private`, whose ``str()`` is only its length. API keys that the daemon loaded are
registered with :func:`register_secret` and masked in every record, and common key shapes
(``Authorization: Bearer ...``, ``sk-...``) are masked even when nobody registered them.
"""

from __future__ import annotations

import logging
import logging.handlers
import re
import threading
from collections.abc import Mapping
from pathlib import Path

import platformdirs

__all__ = [
    "FILE_ONLY",
    "Private",
    "RedactingFilter",
    "log_dir",
    "printable",
    "redact",
    "register_secret",
    "secret_header_values",
    "set_text_shown",
    "setup_logging",
    "text_shown",
]

FILE_ONLY = {"file_only": True}
"""``extra=`` for a record the terminal already shows another way (the CLI's error line)."""

_secrets: set[str] = set()
_secrets_lock = threading.Lock()
_show_text = False

_KEY_PATTERNS = [
    re.compile(r"(?i)(authorization\s*[:=]\s*(?:bearer|basic)\s+)[^\s'\",]+"),
    re.compile(r"(?i)((?:x-api-key|x-goog-api-key|api[_-]?key)\s*[:=]\s*['\"]?)[^\s'\",]+"),
    re.compile(r"(?i)([?&]key=)[^&\s'\"]+"),
    re.compile(r"()\b(?:sk|pk|rk)-[A-Za-z0-9_-]{16,}"),
    re.compile(r"()\bAIza[0-9A-Za-z_-]{30,}"),  # Google API keys
]


class Private:
    """Text that is logged as its length unless the user opted in to logging text."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text if _show_text else f"<{len(self.text)} chars hidden>"

    __repr__ = __str__


def set_text_shown(shown: bool) -> None:
    """privacy.log_text for a command that writes no log but shows errors (``doctor``)."""
    global _show_text  # noqa: PLW0603 - one process-wide privacy switch
    _show_text = shown


def text_shown() -> bool:
    """Whether the user opted in to captured text in logs and messages (privacy.log_text)."""
    return _show_text


_SECRET_HEADER = re.compile(r"(?i)auth|key|token|secret|cookie|session|pass|signature|credential")


def secret_header_values(headers: Mapping[str, str]) -> list[str]:
    """Values of headers whose names say they carry a credential (the bearer part alone
    too: ``Bearer abc`` may be echoed as ``abc``)."""
    values: list[str] = []
    for name, value in headers.items():
        if _SECRET_HEADER.search(name) and value:
            values.append(value)
            scheme, _, token = value.partition(" ")
            if token and scheme.lower() in ("bearer", "basic", "token"):
                values.append(token)
    return values


def register_secret(value: str | None) -> None:
    """Mask ``value`` wherever it would appear in a log record."""
    if value and len(value) >= 4:
        with _secrets_lock:
            _secrets.add(value)


def redact(text: str) -> str:
    with _secrets_lock:
        secrets = sorted(_secrets, key=len, reverse=True)
    for secret in secrets:
        text = text.replace(secret, "***")
    for pattern in _KEY_PATTERNS:
        text = pattern.sub(r"\1***", text)
    return text


_UNPRINTABLE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e"
    "\u2066-\u2069\ud800-\udfff]"
)


def printable(text: str) -> str:
    """``text`` with control characters, bidi overrides and lone surrogates escaped
    (``\\x00``, ``\\u202e``, ``\\ud800``): a log line from the network can neither
    fake another line (CR), drive a terminal (ESC), hide text (U+202E) nor fail to encode
    (a lone surrogate makes the UTF-8 file handler print a traceback instead)."""
    if text.isascii() and text.isprintable():
        return text
    return _UNPRINTABLE.sub(lambda found: ascii(found.group())[1:-1], text)


class RedactingFilter(logging.Filter):
    """Rewrites each record's message (and traceback text) with secrets masked and
    unprintable characters escaped."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = printable(redact(message))
        if cleaned != message or record.args:
            record.msg, record.args = cleaned, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = printable(redact(record.exc_text))
        return True


def log_dir() -> Path:
    return Path(platformdirs.user_log_dir("anyfill", appauthor=False))


def setup_logging(
    *,
    level: str = "INFO",
    to_file: bool = True,
    max_bytes: int = 1_000_000,
    backups: int = 3,
    log_text: bool = False,
    stderr: bool = True,
    stderr_level: str | None = None,
    directory: Path | None = None,
) -> Path | None:
    """Configure the ``anyfill`` logger; returns the log file path when one is written.

    ``stderr_level``: a higher threshold for the terminal than for the file (``complete``
    prints its result there)."""
    global _show_text  # noqa: PLW0603 - one process-wide privacy switch
    _show_text = log_text
    logger = logging.getLogger("anyfill")
    logger.setLevel(level)
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()
    redactor = RedactingFilter()
    formatter = logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    path: Path | None = None
    if to_file:
        directory = directory or log_dir()
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / "anyfill.log"
        file_handler = logging.handlers.RotatingFileHandler(
            path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8"
        )
        file_handler.setFormatter(formatter)
        file_handler.addFilter(redactor)
        logger.addHandler(file_handler)
    if stderr:
        console = logging.StreamHandler()
        console.setFormatter(logging.Formatter("anyfill: %(levelname)s: %(message)s"))
        console.addFilter(redactor)
        console.addFilter(lambda record: not getattr(record, "file_only", False))
        if stderr_level is not None:
            console.setLevel(stderr_level)
        logger.addHandler(console)
    logger.propagate = False
    return path
