"""``anyfill model list|pull|use|rm``: what the CLI shows and does with models."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import click

from anyfill.config.model import DEFAULT_MANAGED_MODEL, BackendConfig, Settings
from anyfill.daemon.errors import ConfigError
from anyfill.daemon.managed.runtime import NoRuntime, find_runtime
from anyfill.daemon.models.catalog import CATALOG, OTHER_FIM_MODELS, CatalogModel, find, human_size
from anyfill.daemon.models.download import DownloadError, download_model
from anyfill.daemon.models.store import looks_like_path, models_dir, part_path, resolve_model

__all__ = ["list_models", "offer_download", "pull_model", "remove_model", "use_model"]


def managed_backends(settings: Settings) -> list[BackendConfig]:
    return [b for b in settings.backends if b.type == "llamacpp-managed"]


def _in_use(settings: Settings) -> dict[str, str]:
    """model spec -> the managed backend using it."""
    return {b.model: b.name for b in managed_backends(settings)}


def list_models(settings: Settings, echo: Callable[[str], None] = click.echo) -> None:
    folder = models_dir(settings.models)
    used = _in_use(settings)
    echo(f"Models for a managed llama-server (kept in {folder}):")
    for model in CATALOG:
        path = folder / model.filename
        if path.is_file():
            status = f"downloaded, {human_size(path.stat().st_size)}"
        elif part_path(path).is_file():
            have = part_path(path).stat().st_size
            status = (
                f"partly downloaded ({have * 100 // model.size}%): 'anyfill model pull' resumes"
            )
        else:
            status = f"not downloaded ({model.size_text})"
        mark = f"  <- used by '{used[model.name]}'" if model.name in used else ""
        echo(f"  {model.name:<20} {model.label}; {status}{mark}")
        echo(f"  {'':<20} {model.note}")
    for spec, backend in used.items():
        if looks_like_path(spec):
            path = Path(spec).expanduser()
            state = "present" if path.is_file() else "MISSING"
            echo(f"  {spec}  ({state})  <- used by '{backend}'")
    echo("")
    echo("Other FIM base models that work (download a GGUF, then 'anyfill model use PATH'):")
    for name, where in OTHER_FIM_MODELS:
        echo(f"  {name}: {where}")
    echo("Instruct/chat models do not: they answer with prose instead of the missing text.")


def _choose(settings: Settings, name: str | None) -> CatalogModel:
    if name is None:
        configured = [b.model for b in managed_backends(settings) if not looks_like_path(b.model)]
        name = configured[0] if configured else DEFAULT_MANAGED_MODEL
    model = find(name)
    if model is None:
        known = ", ".join(m.name for m in CATALOG)
        raise ConfigError(f"unknown model {name!r}; known: {known}")
    return model


def pull_model(settings: Settings, name: str | None, *, yes: bool) -> Path:
    """Download a catalogue model after asking (unless ``yes``), with a progress bar."""
    model = _choose(settings, name)
    destination = models_dir(settings.models) / model.filename
    if destination.is_file():
        click.echo(f"{model.name} is already downloaded: {destination}")
        return destination
    have = part_path(destination).stat().st_size if part_path(destination).is_file() else 0
    left = f", {human_size(model.size - have)} left" if have else ""
    question = (
        f"Download {model.label} ({model.size_text}{left}) from {model.repo_id} "
        f"to {destination.parent}?"
    )
    if not yes and not click.confirm(question, default=True):
        raise click.Abort
    endpoint = settings.models.endpoint or None
    with click.progressbar(
        length=model.size, label=model.name, file=sys.stderr, show_pos=False, show_eta=True
    ) as bar:

        def advance(done: int, total: int) -> None:
            bar.update(done - bar.pos)

        path = download_model(model, destination, endpoint=endpoint, progress=advance)
    click.echo(f"downloaded {model.name} to {path} (SHA-256 verified)")
    return path


def use_model(config_path: Path, spec: str, backend: str | None) -> str:
    """Point the managed backend at ``spec``; returns what to tell the user."""
    from anyfill.daemon.models.config_edit import set_managed_model

    if looks_like_path(spec):
        path = Path(spec).expanduser().resolve()
        if not path.is_file():
            raise ConfigError(f"no GGUF file at {path}")
        with path.open("rb") as handle:
            if handle.read(4) != b"GGUF":
                raise ConfigError(
                    f"{path} is not a GGUF file (llama.cpp runs only GGUF models; "
                    "convert it or download a GGUF build of the model)"
                )
        spec = str(path)
    else:
        resolve_model(spec)  # an unknown name is a ConfigError naming the known ones
        spec = spec.lower()
    settings, name = set_managed_model(config_path, spec, backend)
    model = resolve_model(spec, settings.models)
    note = ""
    if not model.present and model.catalog is not None:
        note = f"; it is not downloaded yet: 'anyfill model pull {model.catalog.name}'"
    return f"backend '{name}' now runs {spec} ({config_path}){note}"


def remove_model(settings: Settings, name: str) -> str:
    model = find(name)
    if model is None:
        raise ConfigError(f"{name!r} is not a downloaded model; see 'anyfill model list'")
    path = models_dir(settings.models) / model.filename
    removed = [p for p in (path, part_path(path)) if p.is_file()]
    if not removed:
        return f"{model.name} is not downloaded"
    freed = sum(p.stat().st_size for p in removed)
    for p in removed:
        p.unlink()
    used = _in_use(settings).get(model.name)
    warning = f"; backend '{used}' still names it and will ask to download it again" if used else ""
    return f"removed {model.name} ({human_size(freed)} freed){warning}"


def _earlier_server_answers(settings: Settings, managed: BackendConfig) -> bool:
    import asyncio

    from anyfill.daemon.backends.http import make_client
    from anyfill.daemon.backends.registry import create_backend
    from anyfill.daemon.managed.prestart import answers

    chain = settings.routing.default
    before = [
        settings.backend(name)
        for name in chain[: chain.index(managed.name)]
        if settings.backend(name).enabled and settings.backend(name).type != managed.type
    ]

    async def check() -> bool:
        for config in before:
            if config.needs_key:
                continue  # a cloud backend: its health says nothing about a local model
            async with make_client(config) as client:
                if await answers(create_backend(config, client)):
                    return True
        return False

    return asyncio.run(check())


def offer_download(settings: Settings) -> None:
    """Before the daemon starts in a terminal: when the managed server will be needed and
    its model is not downloaded, ask to download it now (size and place said)."""
    for config in managed_backends(settings):
        if not config.enabled or config.name not in settings.routing.default:
            continue
        try:
            model = resolve_model(config.model, settings.models)
        except ConfigError:
            continue  # the daemon reports it with the fix
        if model.present or model.catalog is None:
            continue
        if _earlier_server_answers(settings, config):
            continue
        runtime = find_runtime(config.server.binary)
        if isinstance(runtime, NoRuntime):
            # No 1.65 GB download for a server that cannot start: the fix comes first.
            click.echo(
                f"anyfill cannot run llama.cpp itself yet (backend '{config.name}'): "
                f"{runtime.detail}.\nFix: {runtime.fix}.\nThen it asks about the model "
                f"({model.catalog.label}, {model.catalog.size_text}) again, or run "
                f"'anyfill model pull {model.catalog.name}'."
            )
            continue
        click.echo(
            f"No model server of yours answers, so anyfill will run {model.catalog.label} "
            f"itself (backend '{config.name}')."
        )
        try:
            pull_model(settings, model.catalog.name, yes=False)
        except click.Abort:
            click.echo(
                f"Not downloaded: backend '{config.name}' fails until you run "
                f"'anyfill model pull {model.catalog.name}' or start a server of your own."
            )
        except DownloadError as exc:
            # A first run must not end here: anyfill starts as after a "no", and its tray
            # (or the question it opens without one) offers the download again.
            click.echo(f"anyfill: the download failed: {exc}", err=True)
            click.echo(
                f"Starting without it: the tray menu offers the download again, or run "
                f"'anyfill model pull {model.catalog.name}' once the problem is fixed."
            )
