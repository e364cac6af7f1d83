"""``anyfill complete``: the engine from the command line.

Three inputs: a document holding one cursor marker (a file or stdin), a prefix file and a
suffix file, or a JSONL batch (``{"id", "prefix", "suffix"}`` per line). The backend comes
from the configuration (``--backend`` or the routing chain) or is made on the spot with
``--type/--url``. Only the middle is printed, with no newline, so the output can be spliced.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import click
from pydantic import ValidationError

from anyfill.config.model import BACKEND_TYPES, BackendConfig, RoutingConfig, Settings
from anyfill.config.secrets import resolve_api_key
from anyfill.daemon.completion import Completion, CompletionRequest
from anyfill.daemon.context import Context
from anyfill.daemon.engine.engine import Engine
from anyfill.daemon.engine.patience import MAX_BATCH_CONCURRENCY, RatePacer, complete_patiently
from anyfill.daemon.errors import AnyfillError, NeedsKeyError, error_text
from anyfill.daemon.log import redact, setup_logging

__all__ = ["CompleteArgs", "run_complete"]

log = logging.getLogger("anyfill.complete")

EXIT_OK = 0
EXIT_SOME_FAILED = 1

_LANGUAGES = {
    ".py": "Python",
    ".js": "JavaScript",
    ".ts": "TypeScript",
    ".rs": "Rust",
    ".go": "Go",
    ".c": "C",
    ".h": "C",
    ".cpp": "C++",
    ".java": "Java",
    ".rb": "Ruby",
    ".sh": "shell",
    ".md": "Markdown",
    ".txt": "plain text",
}


@dataclass(frozen=True)
class CompleteArgs:
    document: str | None = None
    marker: str | None = None
    prefix_file: Path | None = None
    suffix_file: Path | None = None
    jsonl: str | None = None
    backend_name: str | None = None
    type_name: str | None = None
    url: str | None = None
    model: str | None = None
    api_key_env: str | None = None
    max_tokens: int | None = None
    as_json: bool = False


def run_complete(
    load_settings: Callable[[], Settings],
    args: CompleteArgs,
    *,
    stdin: IO[str] | None = None,
    stdout: IO[str] | None = None,
    debug: bool = False,
) -> int:
    """Run the command; usage problems raise ``click.UsageError`` (exit 2)."""
    # Text is read byte-faithfully (no newline translation): a CRLF document gets a middle
    # with CRLF line ends, ready to splice back.
    stdin = stdin or io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", newline="")
    stdout = stdout or sys.stdout
    forms = sum(
        [args.document is not None, bool(args.prefix_file or args.suffix_file), bool(args.jsonl)]
    )
    if forms > 1:
        raise click.UsageError(
            "give one input: a FILE (or - for stdin), --prefix-file/--suffix-file, or --jsonl"
        )
    settings, chain = _backends(load_settings, args)
    _log_as_configured(settings, debug=debug)
    if args.jsonl:
        text = _read_text(args.jsonl, stdin, "--jsonl", MAX_JSONL_BYTES)
        # Not splitlines(): U+2028 and friends may stand unescaped inside JSON strings.
        lines = [line.removesuffix("\r") for line in text.split("\n")]
        return asyncio.run(_run_batch(settings, chain, lines, args, stdout))
    context = _single_context(args, settings, stdin)
    completion = asyncio.run(_run_one(settings, chain, context, args))
    if args.as_json:
        stdout.write(result_line(_describe(completion)))
    else:
        stdout.write(completion.middle)
    stdout.flush()
    return EXIT_OK


def _log_as_configured(settings: Settings, *, debug: bool) -> None:
    """``[logging]`` and ``[privacy]`` hold for ``complete`` as for the daemon: the file gets
    the configured level, the terminal warnings (everything with ``--debug``)."""
    logs = settings.logging
    setup_logging(
        level="DEBUG" if debug else logs.level,
        to_file=logs.file,
        max_bytes=logs.max_bytes,
        backups=logs.backups,
        log_text=settings.privacy.log_text,
        stderr_level="DEBUG" if debug else "WARNING",
    )


# -- choosing the backend ------------------------------------------------------------------


def _backends(
    load_settings: Callable[[], Settings], args: CompleteArgs
) -> tuple[Settings, tuple[str, ...]]:
    adhoc = args.type_name is not None or args.url is not None
    if adhoc and args.backend_name:
        raise click.UsageError("use either --backend NAME or --type/--url, not both")
    if not adhoc and (args.model or args.api_key_env):
        raise click.UsageError("--model and --api-key-env go with --type and --url")
    settings = load_settings()
    if adhoc:
        config = _adhoc_config(args)
        settings = settings.model_copy(
            update={"backends": [config], "routing": RoutingConfig(default=[config.name])}
        )
        chain: tuple[str, ...] = (config.name,)
    elif args.backend_name:
        names = [b.name for b in settings.backends if b.enabled]
        if args.backend_name not in names:
            raise click.UsageError(
                f"no enabled backend named '{args.backend_name}' "
                f"(configured: {', '.join(names) or 'none'})"
            )
        chain = (args.backend_name,)
    else:
        chain = tuple(settings.routing.default)
    _check_keys(settings, chain, adhoc=adhoc)
    return settings, chain


def _adhoc_config(args: CompleteArgs) -> BackendConfig:
    if args.type_name is None or args.url is None:
        raise click.UsageError("an ad-hoc backend needs both --type and --url")
    if args.type_name not in BACKEND_TYPES:
        raise click.UsageError(
            f"unknown backend type '{args.type_name}'; choose one of: {', '.join(BACKEND_TYPES)}"
        )
    try:
        return BackendConfig(
            name=args.type_name,
            type=args.type_name,  # type: ignore[arg-type]
            url=args.url,
            model=args.model or "",
            key_env=args.api_key_env or "",
        )
    except ValidationError as exc:
        fields = {str(error["loc"][0]) for error in exc.errors() if error["loc"]}
        if "url" in fields:
            raise click.UsageError(
                f"--url {args.url!r} is not an http(s) URL (e.g. http://127.0.0.1:8080)"
            ) from None
        raise click.UsageError(f"invalid ad-hoc backend: {exc.errors()[0]['msg']}") from None


def _check_keys(settings: Settings, chain: Sequence[str], *, adhoc: bool) -> None:
    """Fail before any request when a backend of the chain has no key (exit 2)."""
    for name in chain:
        try:
            config = settings.backend(name)
        except KeyError:
            continue
        if not config.enabled:
            continue
        try:
            resolve_api_key(config)
        except NeedsKeyError as exc:
            if not adhoc:
                raise
            raise NeedsKeyError(
                f"backend type '{config.type}' needs an API key: set the environment variable "
                f"{config.api_key_env} (or name another one with --api-key-env VAR)"
            ) from exc


# -- inputs -----------------------------------------------------------------------------------


MAX_DOCUMENT_BYTES = 16 * 2**20
"""A document, prefix or suffix file: the engine sends a few thousand characters of it."""
MAX_JSONL_BYTES = 256 * 2**20
MAX_JSONL_LINE_CHARS = 16 * 2**20


def _read_text(
    source: str | Path, stdin: IO[str], what: str, limit: int = MAX_DOCUMENT_BYTES
) -> str:
    """The whole text of ``source`` (``-``: standard input), at most ``limit`` characters:
    ``/dev/zero`` or a runaway pipe gets a clear error instead of eating the memory."""
    shown = "standard input" if str(source) == "-" else str(source)
    too_big = click.UsageError(
        f"{what}: {shown} is larger than {limit // 2**20} MiB; anyfill reads at most that"
    )
    try:
        if str(source) == "-":
            text = stdin.read(limit + 1)
        else:
            path = Path(source)
            if path.is_dir():
                raise click.UsageError(f"{what}: {source} is a directory")
            with path.open(encoding="utf-8", newline="") as file:
                text = file.read(limit + 1)
    except FileNotFoundError:
        raise click.UsageError(f"{what}: no such file: {source}") from None
    except UnicodeDecodeError:
        raise click.UsageError(f"{what}: {shown} is not UTF-8 text") from None
    except MemoryError:
        raise too_big from None
    except OSError as exc:
        raise click.UsageError(f"{what}: cannot read {source}: {exc.strerror}") from None
    if len(text) > limit:
        raise too_big
    return text


def _single_context(args: CompleteArgs, settings: Settings, stdin: IO[str]) -> Context:
    if args.prefix_file or args.suffix_file:
        prefix = _read_text(args.prefix_file, stdin, "--prefix-file") if args.prefix_file else ""
        suffix = _read_text(args.suffix_file, stdin, "--suffix-file") if args.suffix_file else ""
        filename = str(args.prefix_file or args.suffix_file)
        return _context(prefix, suffix, filename)
    source = args.document or "-"
    text = _read_text(source, stdin, "FILE")
    if args.marker is not None and not args.marker:
        raise click.UsageError("--marker cannot be empty: name the text that marks the cursor")
    marker = args.marker or settings.capture.cursor_marker
    shown = "standard input" if source == "-" else source
    count = text.count(marker)
    if count == 0:
        raise click.UsageError(
            f"no cursor marker {marker!r} in {shown}: put it where the completion goes "
            "(or name another marker with --marker)"
        )
    if count > 1:
        raise click.UsageError(f"{count} cursor markers {marker!r} in {shown}: keep exactly one")
    prefix, suffix = text.split(marker)
    return _context(prefix, suffix, "" if source == "-" else source)


def _context(prefix: str, suffix: str, filename: str) -> Context:
    language = _LANGUAGES.get(Path(filename).suffix.lower(), "") if filename else ""
    return Context(prefix=prefix, suffix=suffix, method="cli", filename=filename, language=language)


# -- running ------------------------------------------------------------------------------------


async def _run_one(
    settings: Settings, chain: tuple[str, ...], context: Context, args: CompleteArgs
) -> Completion:
    async with Engine(settings) as engine:
        request = CompletionRequest(context, backends=chain, max_tokens=args.max_tokens)
        return await engine.complete(request)


def _describe(completion: Completion) -> dict[str, Any]:
    return {
        "middle": completion.middle,
        "backend": completion.backend,
        "mode": completion.plan.mode,
        "template": completion.plan.template or None,
        "note": completion.plan.note or None,
        "ms": round(completion.ms, 1),
        "first_token_ms": (
            round(completion.first_token_ms, 1) if completion.first_token_ms is not None else None
        ),
        "raw": completion.raw,
        "usage": {
            "prompt_tokens": completion.usage.prompt_tokens,
            "completion_tokens": completion.usage.completion_tokens,
        },
    }


@dataclass(frozen=True)
class _Line:
    number: int
    id: Any
    context: Context | None
    error: str | None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    """A JSON number as a float; ``1e999`` would become infinity, which no JSON answer can
    echo back (the line's id is repeated in its result), so the line is a bad one."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is too large")
    return value


def _unicode_problem(*texts: str) -> bool:
    """A lone surrogate (``"\\ud800"``) is valid JSON syntax but no Unicode text."""
    try:
        for text in texts:
            text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _parse_line(number: int, line: str) -> _Line:
    if len(line) > MAX_JSONL_LINE_CHARS:
        limit = MAX_JSONL_LINE_CHARS // 2**20
        return _Line(number, None, None, f"line {number}: longer than {limit} MiB; skipped")
    try:
        obj = json.loads(line, parse_constant=_reject_constant, parse_float=_finite_float)
    except ValueError as exc:
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        return _Line(number, None, None, f"line {number}: not JSON ({reason})")
    if not isinstance(obj, dict):
        return _Line(number, None, None, f"line {number}: expected a JSON object")
    ident = obj.get("id")
    prefix, suffix = obj.get("prefix"), obj.get("suffix", "")
    if not isinstance(prefix, str) or not isinstance(suffix, str):
        return _Line(number, ident, None, f'line {number}: "prefix" and "suffix" must be strings')
    filename = obj.get("filename") or ""
    if not isinstance(filename, str) or _unicode_problem(prefix, suffix, filename):
        return _Line(
            number, ident, None, f"line {number}: text with a lone surrogate is not Unicode text"
        )
    return _Line(number, ident, _context(prefix, suffix, filename), None)


def result_line(result: dict[str, Any]) -> str:
    """One strict JSON line (RFC 8259: no NaN, no lone surrogates in the UTF-8 output)."""
    text = json.dumps(result, ensure_ascii=False, allow_nan=False)
    if _unicode_problem(text):
        text = json.dumps(result, ensure_ascii=True, allow_nan=False)
    return text + "\n"


async def _run_batch(
    settings: Settings,
    chain: tuple[str, ...],
    lines: list[str],
    args: CompleteArgs,
    stdout: IO[str],
) -> int:
    parsed = [_parse_line(n, line) for n, line in enumerate(lines, 1) if line.strip()]
    limit = sum(
        settings.backend(name).limits.max_concurrent for name in chain if _has(settings, name)
    )
    gate = asyncio.Semaphore(max(1, min(MAX_BATCH_CONCURRENCY, limit)))
    pacer = RatePacer(asyncio.get_running_loop().time)
    failed = False
    async with Engine(settings) as engine:

        async def answer(line: _Line) -> dict[str, Any]:
            out: dict[str, Any] = {
                "id": line.id,
                "line": line.number,
                "middle": None,
                "backend": None,
                "ms": None,
            }
            if line.context is None:
                return {**out, "error": line.error}
            # Batch priority: lines are independent, none supersedes another.
            request = CompletionRequest(
                line.context,
                id=f"line-{line.number}",
                backends=chain,
                max_tokens=args.max_tokens,
                priority="batch",
            )
            async with gate:
                try:
                    done = await complete_patiently(engine, request, asyncio.sleep, pacer)
                except AnyfillError as exc:
                    log.info("line %d failed: %s", line.number, error_text(exc))
                    return {**out, "error": redact(error_text(exc))}
            return {
                **out,
                "middle": done.middle,
                "backend": done.backend,
                "ms": round(done.ms, 1),
                "error": None,
            }

        tasks = [asyncio.create_task(answer(line)) for line in parsed]
        for task in tasks:  # in input order, each as soon as it and those before are done
            result = await task
            failed = failed or result["error"] is not None
            stdout.write(result_line(result))
            stdout.flush()
    return EXIT_SOME_FAILED if failed else EXIT_OK


def _has(settings: Settings, name: str) -> bool:
    return any(b.name == name for b in settings.backends)
