"""The ``anyfill`` command line.

Only click and the standard library are imported at module level: ``anyfill --help`` and
``anyfill version`` must answer without loading Qt, pynput or httpx.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from anyfill.daemon.version import version_string

if TYPE_CHECKING:
    from anyfill.config.model import Settings

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_CONFIG = 2
EXIT_NOT_RUNNING = 3

F = TypeVar("F", bound=Callable[..., Any])


@dataclass
class CliState:
    config_path: Path | None
    debug: bool

    def resolved_config_path(self) -> Path:
        from anyfill.config.store import default_config_path

        return self.config_path or default_config_path()

    def settings(self) -> Settings:
        from anyfill.config.store import load_settings

        return load_settings(self.config_path)


pass_state = click.make_pass_decorator(CliState)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="ANYFILL_CONFIG",
    help="Configuration file (default: the user config dir; env ANYFILL_CONFIG).",
)
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logs.")
@click.pass_context
def cli(ctx: click.Context, config_path: Path | None, debug: bool) -> None:
    """anyfill: fill-in-the-middle completion at the caret of any application."""
    ctx.obj = CliState(config_path=config_path, debug=debug)


@cli.command()
def version() -> None:
    """Print the version."""
    click.echo(f"anyfill {version_string()}")


@cli.command()
@click.option("--headless", is_flag=True, help="Run without the tray and the preview popup.")
@pass_state
def run(state: CliState, headless: bool) -> int:
    """Run anyfill: the tray, the hotkeys, capture, completion, preview and insertion."""
    from anyfill.daemon.app import run_daemon
    from anyfill.daemon.control.instance import single_instance
    from anyfill.daemon.errors import AlreadyRunning

    # Before anything else: a second instance must not grab the hotkeys twice.
    try:
        with single_instance():
            settings = state.settings()
            if sys.stdin.isatty():  # a first run in a terminal: ask before downloading a model
                from anyfill.daemon.managed.model_commands import offer_download

                offer_download(settings)
            return run_daemon(
                settings,
                headless=headless,
                debug=state.debug,
                config_path=state.resolved_config_path(),
            )
    except AlreadyRunning:
        if headless or not _hand_over("show-settings"):
            raise
        click.echo("anyfill is already running: opened its settings instead")
        return EXIT_OK


def _hand_over(command: str) -> bool:
    """Ask the running anyfill to do ``command`` when it knows it (a tray does)."""
    from anyfill.daemon.control.client import call
    from anyfill.daemon.errors import ControlError

    try:
        if command not in call("ping").get("commands", {}):
            return False
        call(command)
    except ControlError:
        return False
    return True


@cli.command()
@click.argument("action", type=click.Choice(["complete", "preview", "cancel"]))
@click.option(
    "--wait", is_flag=True, help="Wait for the outcome and print it (exit 1 unless inserted)."
)
def trigger(action: str, wait: bool) -> int:
    """Tell the running daemon to act as if the ACTION hotkey was pressed.

    Bind `anyfill trigger complete` to a desktop shortcut where anyfill cannot grab keys
    itself (Wayland). Exits 3 when no daemon is running.
    """
    from anyfill.daemon.control.trigger_cmd import run_trigger

    return run_trigger(action, wait)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's answer as JSON.")
def status(as_json: bool) -> int:
    """Show whether the daemon runs, its state, backends and last outcome (exit 3: not running)."""
    import json

    from anyfill.daemon.control.client import call
    from anyfill.daemon.control.render import status_text

    answer = call("status")
    click.echo(json.dumps(answer, indent=2, ensure_ascii=False) if as_json else status_text(answer))
    return EXIT_OK


@cli.command()
@click.argument("command", type=click.Choice(["accept", "dismiss", "next", "previous"]))
def preview(command: str) -> int:
    """Accept, dismiss or cycle the preview popup the running tray shows (exit 1 when none
    shows). Bind it where the popup's own keys cannot be taken (docs/wayland.md)."""
    from anyfill.daemon.control.client import call

    if not call("preview", {"command": command}).get("done"):
        click.echo("no preview is showing", err=True)
        return EXIT_FAILURE
    return EXIT_OK


@cli.command()
def pause() -> None:
    """Make the running daemon ignore hotkey presses until `anyfill resume`."""
    from anyfill.daemon.control.client import call

    call("pause")
    click.echo("anyfill is paused")


@cli.command()
def resume() -> None:
    """Make the running daemon act on hotkey presses again."""
    from anyfill.daemon.control.client import call

    call("resume")
    click.echo("anyfill is resumed")


@cli.command("settings")
@pass_state
def settings_cmd(state: CliState) -> int:
    """Open the settings panel; a running anyfill applies what you save at once."""
    from importlib.metadata import entry_points

    if _tray_shows_settings():
        click.echo("the running anyfill opened its settings window")
        return EXIT_OK

    # The panel is Qt (anyfill.ui): found through its entry point, the core never imports Qt.
    from anyfill.config.model import Settings
    from anyfill.config.store import InvalidConfig

    try:
        settings = state.settings()
    except InvalidConfig:
        settings = Settings()  # the panel reads the file itself and shows its problems
    for entry in entry_points(group="anyfill.frontends", name="settings"):
        frontend: Callable[[Settings, Path], int] = entry.load()
        return frontend(settings, state.resolved_config_path())
    raise click.ClickException("the settings panel is not installed (anyfill.ui, PySide6)")


def _tray_shows_settings() -> bool:
    """A running tray has the one settings window (and the bridge its Test runs on): ask it
    to show it rather than open a second panel."""
    from anyfill.daemon.control.client import call
    from anyfill.daemon.errors import ControlError

    try:
        if "show-settings" not in call("ping").get("commands", ()):
            return False
        call("show-settings")
    except ControlError:  # none running, or it refused: open the panel here
        return False
    return True


@cli.command()
@click.argument("document", required=False, metavar="[FILE|-]")
@click.option("--marker", help="Cursor marker in the document (default: capture.cursor_marker).")
@click.option(
    "--prefix-file", type=click.Path(dir_okay=False, path_type=Path), help="Text before the cursor."
)
@click.option(
    "--suffix-file", type=click.Path(dir_okay=False, path_type=Path), help="Text after the cursor."
)
@click.option("--jsonl", metavar="IN.jsonl", help='Batch: one {"id","prefix","suffix"} per line.')
@click.option("--backend", "backend_name", metavar="NAME", help="A configured backend.")
@click.option("--type", "type_name", metavar="TYPE", help="Ad-hoc backend type (with --url).")
@click.option("--url", help="Ad-hoc backend URL.")
@click.option("--model", help="Model for the ad-hoc backend.")
@click.option("--api-key-env", metavar="VAR", help="Environment variable with the ad-hoc key.")
@click.option(
    "--max-tokens",
    type=click.IntRange(1, 32768),
    metavar="N",
    help="Longest answer, in tokens (default: the backend's max_tokens).",
)
@click.option("--json", "as_json", is_flag=True, help="Print backend, mode, timing and raw text.")
@pass_state
def complete(state: CliState, /, **options: Any) -> int:
    """Print the text that belongs at the cursor marker of FILE (or stdin).

    \b
    Inputs (one of):
      FILE or -                     a document holding one cursor marker
      --prefix-file/--suffix-file   the text before and after the cursor
      --jsonl IN.jsonl              {"id","prefix","suffix"} per line; prints one
                                    {"id","line","middle","backend","ms","error"}
                                    per line ("line": its line number in IN.jsonl)
    Backend: --backend NAME from the configuration, or an ad-hoc one with
    --type TYPE --url URL [--model M] [--api-key-env VAR], TYPE being one of
    llamacpp, ollama, openai-completions, mistral-fim, openai-chat, anthropic, gemini.
    """
    from anyfill.daemon.complete_cmd import CompleteArgs, run_complete

    return run_complete(state.settings, CompleteArgs(**options), debug=state.debug)


@cli.command("eval")
@click.option(
    "--suite",
    type=click.Choice(["single-line", "multi-line", "random-span", "random-span-light"]),
    default="single-line",
    show_default=True,
    help="HumanEval infilling suite (1033 / 5815 / 1640 / 164 problems).",
)
@click.option(
    "--backend",
    "backends",
    metavar="NAME",
    multiple=True,
    help="A configured backend; repeat to compare (default: the routing chain's first).",
)
@click.option("--limit", type=click.IntRange(1), metavar="N", help="Only the first N problems.")
@click.option(
    "--execute",
    is_flag=True,
    help="Run each problem's test on prefix+middle+suffix (sandboxed) and report pass@1.",
)
@click.option(
    "--time-limit",
    "time_limit_s",
    type=click.FloatRange(0.1, 600),
    default=5.0,
    show_default=True,
    metavar="SECONDS",
    help="Time limit of one test run with --execute.",
)
@click.option("--max-tokens", type=click.IntRange(1, 32768), help="Tokens per completion.")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    metavar="DIR",
    help="Write results.jsonl (per problem), summary.json and eval.png here.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON (for scripts).")
@pass_state
def eval_(state: CliState, /, **options: Any) -> int:
    """Measure backends on HumanEval infilling through the engine a press uses.

    \b
    Every problem goes through the same templates, post-processing and scheduler
    limits as a hotkey press. Per backend it prints exact match, edit similarity,
    pass@1 (with --execute), p50/p95 latency and tokens, beside published reference
    scores. Ctrl+C stops and keeps what finished. The plot needs matplotlib
    (pip install 'anyfill[eval]'). See docs/eval.md.
    """
    from anyfill.daemon.evaluation.command import EvalArgs, run_eval

    options["backends"] = tuple(options["backends"])
    return run_eval(state.settings, EvalArgs(**options), debug=state.debug)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the findings and verdict as JSON.")
@pass_state
def doctor(state: CliState, as_json: bool) -> int:
    """Check the set-up: config, backends, session, tray, keys, clipboard, accessibility,
    keyring, autostart. Exits 0 when anyfill can work, 1 when it cannot, 2 on a broken
    configuration."""
    from anyfill.daemon.doctor.report import run_doctor

    return run_doctor(state.settings, state.resolved_config_path(), as_json=as_json)


@cli.group()
def autostart() -> None:
    """Start anyfill with your session (XDG autostart or systemd on Linux, a LaunchAgent on
    macOS, the Run key on Windows)."""


@autostart.command("enable")
@click.option(
    "--method",
    type=click.Choice(["xdg", "systemd"]),
    help="Linux: an XDG autostart entry (any desktop; the first time's default) or a systemd "
    "user unit bound to graphical-session.target (restarted when it fails). Default: the "
    "one already in place.",
)
@click.option("--force", is_flag=True, help="Replace files you edited (a copy is kept).")
def autostart_enable(method: str | None, force: bool) -> None:
    """Start anyfill at log-in, and add it to the application menu (Linux). Running it
    again updates what it wrote; a file you edited is left alone unless --force."""
    from anyfill.daemon.autostart.manager import enable

    for line in enable(method, force=force):
        click.echo(line)


@autostart.command("disable")
@click.option("--force", is_flag=True, help="Also remove entries you edited (a copy is kept).")
def autostart_disable(force: bool) -> None:
    """Stop starting anyfill at log-in (the menu launcher stays)."""
    from anyfill.daemon.autostart.manager import disable

    for line in disable(force=force):
        click.echo(line)


@autostart.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print the entries found as JSON.")
def autostart_status(as_json: bool) -> None:
    """Say whether and how anyfill starts with the session."""
    import json

    from anyfill.daemon.autostart.manager import status

    found = status()
    click.echo(json.dumps(found.as_dict(), indent=2) if as_json else found.text())


@cli.command()
@click.option("--pool", metavar="NAME", help="The pool to serve (default: mqtt.worker_pool).")
@click.option("--id", "worker_id", metavar="ID", help="This worker's name (default: host-pid).")
@click.option(
    "--batch-window-ms",
    type=click.FloatRange(0, 1000),
    default=0.0,
    show_default=True,
    help="Batch the prompts that arrive within this window into one request to a server "
    "that takes prompt lists (0: no batching; answers stream).",
)
@click.option("--limit-window-s", type=click.FloatRange(0.1), hidden=True, default=60.0)
@click.option("--sends-log", type=click.Path(dir_okay=False), hidden=True)
@pass_state
def worker(
    state: CliState,
    *,
    pool: str | None,
    worker_id: str | None,
    batch_window_ms: float,
    limit_window_s: float,
    sends_log: str | None,
) -> None:
    """Serve a pool's completions from the broker of [mqtt] with this host's backends.

    Desktops reach the pool through a backend of type 'mqtt' with the same pool name. The
    backends' per-minute limits are the whole pool's: each worker enforces its share.
    """
    from anyfill.daemon.worker.run import run_worker

    settings = state.settings()
    name = pool or settings.mqtt.worker_pool
    if not name:
        raise click.UsageError("name the pool: --pool NAME (or mqtt.worker_pool)")
    for what, value in (("--pool", name), ("--id", worker_id or "ok")):
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", value):
            raise click.UsageError(f"{what} {value!r}: use letters, digits, '-', '_' or '.'")
    if settings.mqtt.protocol != "5":
        raise click.UsageError('worker pools need MQTT 5: set mqtt.protocol = "5"')
    sys.exit(
        run_worker(
            settings,
            name,
            worker_id=worker_id,
            batch_window_s=batch_window_ms / 1000,
            limit_window_s=limit_window_s,
            sends_log=sends_log,
            debug=state.debug,
        )
    )


@cli.command()
@click.argument("which", nargs=-1, type=click.Choice(["p2", "p3", "p4", "p6", "mqtt", "all"]))
@click.option("--quick", is_flag=True, help="Fewer repetitions: a rough figure, sooner.")
@click.option("--no-peers", is_flag=True, help="P2 without the openai SDK and LiteLLM.")
def bench(which: tuple[str, ...], quick: bool, no_peers: bool) -> None:
    """Measure the request path against a loopback stub: P2 client cost, P3 cancel to
    socket close, P4 batching, P6 rate limiter, mqtt worker pools (default: all)."""
    from anyfill.bench import run_benchmarks

    run_benchmarks(which or ("all",), quick=quick, peers=not no_peers, say=click.echo)


@cli.group()
def model() -> None:
    """List, download, choose and remove the models anyfill's own llama-server runs."""


@model.command("list")
@pass_state
def model_list(state: CliState) -> None:
    """The models anyfill offers, which are downloaded, and which one is in use."""
    from anyfill.daemon.managed.model_commands import list_models

    list_models(state.settings())


@model.command("pull")
@click.argument("name", required=False)
@click.option("--yes", "-y", is_flag=True, help="Do not ask before downloading.")
@pass_state
def model_pull(state: CliState, name: str | None, yes: bool) -> None:
    """Download NAME (default: the configured model); asks first, resumes, verifies."""
    from anyfill.daemon.managed.model_commands import pull_model

    pull_model(state.settings(), name, yes=yes)


@model.command("use")
@click.argument("name_or_path")
@click.option("--backend", metavar="NAME", help="Which managed backend (when there are several).")
@pass_state
def model_use(state: CliState, name_or_path: str, backend: str | None) -> None:
    """Make the managed llama-server run NAME (see 'model list') or a GGUF file at PATH."""
    from anyfill.daemon.managed.model_commands import use_model

    click.echo(use_model(state.resolved_config_path(), name_or_path, backend))


@model.command("rm")
@click.argument("name")
@pass_state
def model_rm(state: CliState, name: str) -> None:
    """Delete a downloaded model (and any partial download of it)."""
    from anyfill.daemon.managed.model_commands import remove_model

    click.echo(remove_model(state.settings(), name))


@cli.group()
def config() -> None:
    """Show, create and check the configuration file."""


@config.command("path")
@pass_state
def config_path(state: CliState) -> None:
    """Print the configuration file's path."""
    click.echo(str(state.resolved_config_path()))


@config.command("init")
@click.option("--force", is_flag=True, help="Replace an existing file.")
@pass_state
def config_init(state: CliState, force: bool) -> None:
    """Write a commented default configuration file."""
    from anyfill.config.store import write_default_config

    path = write_default_config(state.resolved_config_path(), force=force)
    click.echo(f"wrote {path}")


@config.command("show")
@click.option("--changed", is_flag=True, help="Only keys that differ from the defaults.")
@pass_state
def config_show(state: CliState, changed: bool) -> None:
    """Print the effective configuration (file + environment) as TOML."""
    import tomlkit

    from anyfill.config.store import removed_default_backends, shown_settings

    settings = state.settings()
    data = shown_settings(settings, changed_only=changed)
    click.echo(tomlkit.dumps(data), nl=False)
    removed = removed_default_backends(settings) if changed else []
    if removed:
        click.echo(f"# default backends left out of the file: {', '.join(removed)}")


@config.command("validate")
@pass_state
def config_validate(state: CliState) -> None:
    """Check the configuration file; exits 2 and names each problem's line and key.

    No file is no problem (as for `anyfill doctor`): the defaults are in force."""
    from anyfill.config.store import load_settings

    path = state.resolved_config_path()
    if not path.exists():
        click.echo(
            f"{path}: no file, so the defaults are in force ('anyfill config init' writes one)"
        )
        return
    load_settings(path, missing_ok=False)
    click.echo(f"{path}: ok")


@config.command("set-key")
@click.argument("backend")
@click.option(
    "--stdin", "from_stdin", is_flag=True, help="Read the key from standard input (for scripts)."
)
@pass_state
def config_set_key(state: CliState, backend: str, from_stdin: bool) -> None:
    """Store BACKEND's API key in the system keyring (or the broker password, mqtt.password_key,
    or the remote insert key, mqtt.insert_key)."""
    from anyfill.config.secrets import store_api_key

    settings = state.settings()
    names = [b.name for b in settings.backends]
    names += [name for name in (settings.mqtt.password_key, settings.mqtt.insert_key) if name]
    if backend not in names:
        raise click.BadParameter(
            f"no backend named '{backend}' (configured: {', '.join(names) or 'none'})",
            param_hint="BACKEND",
        )
    key = (
        sys.stdin.readline().strip()
        if from_stdin
        else click.prompt(f"API key for {backend}", hide_input=True)
    )
    store_api_key(backend, key)
    click.echo(f"stored the key for '{backend}' in the system keyring")


def main(argv: list[str] | None = None) -> int:
    """Entry point: one clear line on error, a traceback only with --debug."""
    from anyfill.daemon.errors import AnyfillError, ConfigError, NotRunning

    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        result = cli.main(args=argv, prog_name="anyfill", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("anyfill: aborted", err=True)
        return EXIT_FAILURE
    except click.ClickException as exc:
        # One prefix for every error (click's own would print "Error:").
        if isinstance(exc, click.UsageError) and exc.ctx is not None:
            click.echo(exc.ctx.get_usage(), err=True)
        click.echo(f"anyfill: error: {exc.format_message()}", err=True)
        return EXIT_CONFIG if isinstance(exc, click.UsageError) else EXIT_FAILURE
    except ConfigError as exc:
        _report(exc, debug)
        return EXIT_CONFIG
    except NotRunning as exc:
        _report(exc, debug)
        return EXIT_NOT_RUNNING
    except AnyfillError as exc:
        _report(exc, debug)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # the last line of defence: one clear line, not a dump
        if debug:
            raise
        click.echo(
            f"anyfill: internal error: {type(exc).__name__}: {exc} "
            "(run with --debug for the traceback, and please report it)",
            err=True,
        )
        return EXIT_FAILURE
    # A command may return its exit code (`complete --jsonl` when some lines failed).
    return result if isinstance(result, int) else EXIT_OK


def _report(exc: BaseException, debug: bool) -> None:
    from anyfill.config.store import InvalidConfig

    if debug:
        import traceback

        traceback.print_exception(exc)
    if isinstance(exc, InvalidConfig):
        path = exc.path or "<config>"
        click.echo(f"anyfill: error: {path}: invalid configuration", err=True)
        for problem in exc.problems:
            click.echo(f"  {problem.render(path)}", err=True)
    else:
        from anyfill.daemon.errors import error_text
        from anyfill.daemon.log import redact

        click.echo(f"anyfill: error: {redact(error_text(exc))}", err=True)


if __name__ == "__main__":
    sys.exit(main())
