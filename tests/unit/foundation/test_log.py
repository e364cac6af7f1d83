from __future__ import annotations

import logging
from pathlib import Path

from anyfill.daemon.log import Private, register_secret, setup_logging


def _log_file_after(tmp_path: Path, *, log_text: bool, emit: object) -> str:
    path = setup_logging(level="DEBUG", directory=tmp_path, stderr=False, log_text=log_text)
    assert path is not None
    emit(logging.getLogger("anyfill.test"))  # type: ignore[operator]
    for handler in logging.getLogger("anyfill").handlers:
        handler.flush()
    return path.read_text()


def test_registered_secrets_and_key_shapes_never_reach_the_log(tmp_path: Path) -> None:
    register_secret("s3cr3t-value-123")

    def emit(log: logging.Logger) -> None:
        log.info("sending with key %s", "s3cr3t-value-123")
        log.info("headers: Authorization: Bearer abcdefghijklmnop x-api-key: zzzzzzzzzz")
        log.info("url https://h/v1?key=AIzaSomething&alt=sse and sk-ABCDEFGHIJKLMNOPQRSTU")

    text = _log_file_after(tmp_path, log_text=False, emit=emit)
    for leaked in (
        "s3cr3t-value-123",
        "abcdefghijklmnop",
        "zzzzzzzzzz",
        "AIzaSomething",
        "sk-ABCD",
    ):
        assert leaked not in text
    assert text.count("***") >= 5


def test_captured_text_is_hidden_unless_opted_in(tmp_path: Path) -> None:
    def emit(log: logging.Logger) -> None:
        log.info("captured %s", Private("my private prefix"))

    hidden = _log_file_after(tmp_path / "a", log_text=False, emit=emit)
    assert "my private prefix" not in hidden
    assert "<17 chars hidden>" in hidden
    shown = _log_file_after(tmp_path / "b", log_text=True, emit=emit)
    assert "my private prefix" in shown


def test_secrets_in_tracebacks_are_masked(tmp_path: Path) -> None:
    register_secret("traceback-secret-999")

    def emit(log: logging.Logger) -> None:
        try:
            raise RuntimeError("failed with traceback-secret-999")
        except RuntimeError:
            log.exception("boom")

    text = _log_file_after(tmp_path, log_text=False, emit=emit)
    assert "RuntimeError" in text
    assert "traceback-secret-999" not in text
