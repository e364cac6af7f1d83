"""The supervisor of one managed ``llama-server``: start, health, restart, stop.

One background task owns the process. It finds the binary and the model (publishing
``missing_binary`` / ``missing_model`` with the fix when one is absent), starts the
server on a free 127.0.0.1 port (another one when the port was taken in between), waits
for ``/health`` to say the model is loaded, and then watches the process: when it dies,
it is started again after a back-off (at once the first time, then 1, 2, 4 ... 60 s; a
server that stayed up for a minute starts the count again). Its output is appended to
``llama-server-<backend>.log`` in the log folder. Closing stops it (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import httpx

from anyfill.config.model import BackendConfig, ModelsConfig
from anyfill.daemon.bus import EventBus
from anyfill.daemon.errors import (
    AnyfillError,
    BackendTimeout,
    BackendUnavailable,
    ConfigError,
)
from anyfill.daemon.log import log_dir, register_secret
from anyfill.daemon.managed.binary import FoundBinary
from anyfill.daemon.managed.events import ManagedServerChanged, ServerState
from anyfill.daemon.managed.ownership import port_owner
from anyfill.daemon.managed.process import Tie, spawn_tied
from anyfill.daemon.managed.runtime import NoRuntime, find_runtime
from anyfill.daemon.models.store import LocalModel, resolve_model

__all__ = ["LlamaServerSupervisor", "free_port"]

log = logging.getLogger("anyfill.managed")

HOST = "127.0.0.1"
HEALTH_POLL_S = 0.05
BACKOFF_S = (0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 60.0)
STABLE_AFTER_S = 60.0
"""A server that ran this long without dying resets the back-off."""
STOP_GRACE_S = 5.0
HEALTH_EVERY_S = 10.0
HEALTH_TIMEOUT_S = 5.0
HEALTH_MISSES = 3
"""A running server that misses this many ``/health`` checks in a row is killed (then
started again): about 45 s of not answering, far longer than any completion."""
LOG_ROTATE_BYTES = 5_000_000
BIND_RETRIES = 3


def _private_dir() -> str | None:
    """The user's runtime dir (``<XDG_RUNTIME_DIR>/anyfill``, mode 0700): emptied at logout,
    so a key left by a daemon that was killed does not pile up. None: the temp dir."""
    from anyfill.daemon.errors import AnyfillError
    from anyfill.daemon.runtime_dir import control_dir, ensure_private_dir

    try:
        return ensure_private_dir(control_dir())
    except (AnyfillError, OSError):
        return None


def remove_stale_keys(folder: Path) -> None:
    """Key folders of daemons that were killed (their pid is in the name) go away."""
    if sys.platform == "win32":  # os.kill(pid, 0) would terminate the process there
        return
    for entry in folder.glob("llama-key-*-*"):
        pid = entry.name.split("-")[2]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(entry, ignore_errors=True)
        except PermissionError:
            pass  # alive, someone else's


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


class StartFailed(Exception):
    def __init__(self, message: str, *, bind: bool = False, foreign: str = "") -> None:
        super().__init__(message)
        self.bind = bind
        self.foreign = foreign
        """Who holds the port when it is not our child (:meth:`PortOwner.describe`)."""


class LlamaServerSupervisor:
    """Runs one llama-server for a ``llamacpp-managed`` backend config."""

    def __init__(
        self,
        config: BackendConfig,
        models: ModelsConfig | None = None,
        *,
        bus: EventBus | None = None,
        logs: Path | None = None,
        pick_port: Callable[[], int] = free_port,
        tie: Tie = "auto",
    ) -> None:
        self.config = config
        self.models = models or ModelsConfig()
        self.bus = bus
        self.logs = logs or log_dir()
        self.pick_port = pick_port
        self.tie: Tie = tie
        """How the child is kept from outliving the daemon (see ``process.spawn_tied``)."""
        self.health_every_s = HEALTH_EVERY_S
        self.health_timeout_s = HEALTH_TIMEOUT_S
        self.health_misses = HEALTH_MISSES
        self._hung = 0
        self.state: ServerState = "stopped"
        self.last_event = ManagedServerChanged(self.name, "stopped", model=config.model)
        """The state as last published: what a tray that starts listening late shows first."""
        self._detail = ""
        self.url = ""
        self.error: AnyfillError | None = None
        """Why the server cannot serve now (missing file, crash during back-off)."""
        self.process: asyncio.subprocess.Process | None = None
        self.starts = 0
        """Times the server became ready; more than one means it was restarted."""
        self._task: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()
        self._wake = asyncio.Event()
        self._closing = False
        self.api_key = secrets.token_urlsafe(24)
        """Only anyfill may use the server: other local users see a port, not the key (it
        is passed in a private file, never on the command line)."""
        register_secret(self.api_key)
        self._key_dir: Path | None = None

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def closing(self) -> bool:
        return self._closing

    @property
    def log_path(self) -> Path:
        return self.logs / f"llama-server-{self.name}.log"

    # -- what the backend calls ------------------------------------------------------------

    def start_soon(self) -> None:
        """Start the server in the background (no-op when it runs or is starting)."""
        if self._closing:
            return
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name=f"llama-server-{self.name}")
        else:
            self._wake.set()  # a waiting loop looks at the files again

    async def ready_url(self, wait_s: float) -> str:
        """The server's URL once it serves; starts it when needed. Raises at once when it
        cannot (a missing file, a crash being backed off), BackendTimeout after ``wait_s``."""
        if self.state in ("missing_binary", "missing_model"):
            # The user may have installed or downloaded it since: look again now.
            if self._binary() is None or self._model() is None:
                assert self.error is not None
                raise self.error
            self._set("starting", "found what was missing")
        elif self.state == "failed":
            self._set("starting", "trying again after a failure of the supervisor")
        if self.state != "ready":
            self.start_soon()
        deadline = time.monotonic() + wait_s
        while True:
            if self.state == "ready":
                if self.still_ours():
                    return self.url
                self._set("starting", "the port is no longer llama-server's; starting it again")
                await self._stop_process()  # the watch loop starts a new one
                continue
            if self.error is not None and self.state != "starting":
                raise self.error
            changed = self._changed
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BackendTimeout(
                    self.name,
                    f"backend '{self.name}': llama-server did not finish loading the model "
                    f"within {wait_s:.0f} s (log: {self.log_path})",
                )
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await changed.wait()

    async def aclose(self) -> None:
        self._closing = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._stop_process()
        if self._key_dir is not None:
            shutil.rmtree(self._key_dir, ignore_errors=True)
            self._key_dir = None
        if task is not None:
            self._set("stopped", "stopped with the daemon")

    def _key_file(self) -> Path:
        if self._key_dir is None:
            folder = _private_dir()
            if folder is not None:
                remove_stale_keys(Path(folder))
            prefix = f"llama-key-{os.getpid()}-"
            self._key_dir = Path(tempfile.mkdtemp(prefix=prefix, dir=folder))
        path = self._key_dir / "api-key"
        if not path.exists():
            path.touch(mode=0o600)
            path.write_text(self.api_key + "\n")
        return path

    # -- state -------------------------------------------------------------------------------

    def _set(
        self,
        state: ServerState,
        detail: str = "",
        *,
        fix: str = "",
        error: AnyfillError | None = None,
        model: LocalModel | None = None,
    ) -> None:
        repeated = state == self.state and detail == self._detail
        self.state = state
        self.error = error
        self._detail = detail
        if state != "ready":
            self.url = self.url if state == "starting" else ""
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
        if repeated:
            return
        # A missing file is INFO: the daemon's console and log show it, and a one-shot
        # command (anyfill complete) does not print it twice before its own error.
        trouble = state == "restarting"
        fix_text = f"; fix: {fix}" if fix else ""
        log.log(
            logging.WARNING if trouble else logging.INFO,
            "managed llama-server '%s': %s: %s%s",
            self.name,
            state,
            detail,
            fix_text,
        )
        catalog = model.catalog if model is not None else None
        self.last_event = ManagedServerChanged(
            backend=self.name,
            state=state,
            detail=detail,
            fix=fix,
            url=self.url,
            pid=self.process.pid if self.process is not None else None,
            model=model.spec if model is not None else self.config.model,
            model_size=catalog.size if catalog is not None else 0,
            model_dir=str(model.path.parent) if model is not None else "",
        )
        if self.bus is not None:
            self.bus.publish(self.last_event)

    # -- the loop ----------------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            await self._loop()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug here must not leave requests waiting for nothing
            log.exception("managed llama-server '%s': the supervisor failed", self.name)
            await self._stop_process()
            detail = f"anyfill's supervisor failed ({type(exc).__name__}: {exc})"
            self._set(
                "failed",
                detail,
                fix="see the log; the next request tries again",
                error=BackendUnavailable(self.name, f"backend '{self.name}': {detail}"),
            )

    async def _loop(self) -> None:
        failures = 0
        while not self._closing:
            found = self._binary()
            model = self._model() if found is not None else None
            if found is None or model is None:
                await self._wait_for_wake()
                continue
            started = time.monotonic()
            try:
                await self._start(found, model)
            except StartFailed as exc:
                await self._stop_process()
                failures += 1
                await self._back_off(failures, str(exc), model)
                continue
            self.starts += 1
            code = await self._watch()
            if self.closing:
                return
            uptime = time.monotonic() - started
            failures = 1 if uptime >= STABLE_AFTER_S else failures + 1
            why = f"llama-server exited with code {code}"
            if self._hung:
                why = (
                    f"llama-server stopped answering /health ({self._hung} checks), "
                    "so it was killed"
                )
            await self._back_off(failures, why, model)

    def _binary(self) -> FoundBinary | None:
        found = find_runtime(self.config.server.binary)
        if isinstance(found, NoRuntime):
            detail, fix = found.detail, found.fix
            self._set(
                "missing_binary",
                detail,
                fix=fix,
                error=BackendUnavailable(self.name, f"backend '{self.name}': {detail}; {fix}"),
            )
            return None
        return found

    def _model(self) -> LocalModel | None:
        try:
            model = resolve_model(self.config.model, self.models)
        except ConfigError as exc:
            error = BackendUnavailable(self.name, f"backend '{self.name}': {exc}")
            self._set("missing_model", str(exc), fix="anyfill model list", error=error)
            return None
        if model.present:
            return model
        if model.catalog is not None:
            entry = model.catalog
            detail = (
                f"the model {entry.name} ({entry.label}, {entry.size_text}) is not downloaded "
                f"yet; it goes to {model.path.parent}"
            )
            fix = f"anyfill model pull {entry.name}"
        else:
            detail = f"no model file at {model.path}"
            fix = "anyfill model use NAME|PATH (see 'anyfill model list')"
        self._set(
            "missing_model",
            detail,
            fix=fix,
            model=model,
            # Unavailable, not "not found": the chain goes on to the next backend meanwhile.
            error=BackendUnavailable(self.name, f"backend '{self.name}': {detail}; run '{fix}'"),
        )
        return None

    async def _wait_for_wake(self) -> None:
        self._wake.clear()
        await self._wake.wait()

    async def _back_off(self, failures: int, why: str, model: LocalModel) -> None:
        delay = BACKOFF_S[min(failures - 1, len(BACKOFF_S) - 1)]
        detail = f"{why}; starting it again in {delay:.0f} s (log: {self.log_path})"
        # Requests wait for an immediate restart, and fail over to the next backend
        # while a crashing server is backed off.
        error = BackendUnavailable(self.name, f"backend '{self.name}': {detail}") if delay else None
        self._set("restarting", detail, model=model, error=error)
        if delay:
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._wake.wait()

    # -- one process -------------------------------------------------------------------------

    def command(self, binary: FoundBinary, model: Path, port: int) -> list[str]:
        server = self.config.server
        argv = [
            *binary.argv,
            "--model", str(model),
            "--host", HOST,
            "--port", str(port),
            "--ctx-size", str(server.context_size),
            "--api-key-file", str(self._key_file()),
        ]  # fmt: skip
        if server.threads:
            argv += ["--threads", str(server.threads)]
        if server.gpu_layers >= 0:
            argv += ["--n-gpu-layers", str(server.gpu_layers)]
        return argv + list(server.args)

    def _configured_port(self) -> int:
        return httpx.URL(self.config.url).port or 0

    async def _start(self, found: FoundBinary, model: LocalModel) -> None:
        fixed = self._configured_port()
        for attempt in range(BIND_RETRIES):
            port = fixed or self.pick_port()
            try:
                await self._start_once(found, model, port)
                return
            except StartFailed as exc:
                await self._stop_process()
                if not exc.bind:
                    raise
                if fixed:
                    who = f" ({exc.foreign}; anyfill sent it nothing)" if exc.foreign else ""
                    raise StartFailed(
                        f"port {port} (backends.{self.name}.url) is taken by another "
                        f"program{who}; free it, or remove the url to let anyfill pick a "
                        "free port"
                    ) from exc
                if exc.foreign:
                    log.warning(
                        "port %d: %s before llama-server bound it; anyfill sent it nothing "
                        "and tries another port",
                        port,
                        exc.foreign,
                    )
                else:
                    log.info("port %d was taken before llama-server bound it; trying another", port)
                if attempt == BIND_RETRIES - 1:
                    raise

    def _open_log(self) -> IO[bytes]:
        self.logs.mkdir(parents=True, exist_ok=True)
        path = self.log_path
        with contextlib.suppress(OSError):
            if path.stat().st_size > LOG_ROTATE_BYTES:
                path.replace(path.with_name(path.name + ".1"))
        return path.open("ab")

    async def _start_once(self, binary: FoundBinary, model: LocalModel, port: int) -> None:
        argv = self.command(binary, model.path, port)
        self.url = f"http://{HOST}:{port}"
        with self._open_log() as handle:
            offset = handle.tell()
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            handle.write(f"=== {stamp} anyfill starts: {' '.join(argv)}\n".encode())
            handle.flush()
            try:
                self.process = await spawn_tied(argv, handle, self.tie)
            except OSError as exc:
                raise StartFailed(f"cannot run {binary.path}: {exc}") from exc
        self._set("starting", f"loading {model.path.name} on port {port}", model=model)
        await self._wait_healthy(offset, model)
        self._set("ready", f"serving {model.path.name} at {self.url}", model=model)

    async def _wait_healthy(self, log_offset: int, model: LocalModel) -> None:
        assert self.process is not None
        deadline = time.monotonic() + self.config.server.start_timeout_s
        health = f"{self.url}/health"
        headers = {"Authorization": f"Bearer {self.api_key}"}
        port = httpx.URL(self.url).port or 0
        async with httpx.AsyncClient(timeout=2.0, trust_env=False, headers=headers) as client:
            while True:
                # Nothing (not the key, not /health) goes to a listener anyfill's child
                # does not hold: another user may have bound the port first.
                owner = port_owner(port, self.process.pid)
                if owner.verdict == "other":
                    raise StartFailed(
                        f"port {port} is not llama-server's: {owner.describe()}",
                        bind=True,
                        foreign=owner.describe(),
                    )
                if self.process.returncode is not None:
                    tail = self._log_since(log_offset)
                    bind = "bind" in tail.lower() or "address already in use" in tail.lower()
                    last = tail.strip().splitlines()[-1:] or [""]
                    raise StartFailed(
                        f"llama-server exited with code {self.process.returncode} while "
                        f"loading {model.path.name}: {last[0]}",
                        bind=bind,
                    )
                if owner.verdict != "nobody":  # 'nobody': not bound yet, ask nothing
                    with contextlib.suppress(httpx.HTTPError):
                        answer = await client.get(health)
                        if answer.status_code == 200 and await self._is_ours(client, model):
                            return
                if time.monotonic() > deadline:
                    raise StartFailed(
                        f"llama-server did not load {model.path.name} within "
                        f"{self.config.server.start_timeout_s:.0f} s"
                    )
                await asyncio.sleep(HEALTH_POLL_S)

    async def _is_ours(self, client: httpx.AsyncClient, model: LocalModel) -> bool:
        """A second check after the socket's (the only one where there is no /proc):
        llama-server and the prebuilt runtime answer ``/props`` with the model they loaded;
        anything else (401: another key, 404: not llama.cpp) is not the server we started."""
        answer = await client.get(f"{self.url}/props")
        if answer.status_code != 200:
            return False
        try:
            props = answer.json()
        except ValueError:
            return False
        path = str(props.get("model_path") or "") if isinstance(props, dict) else ""
        return not path or Path(path).name == model.path.name

    def still_ours(self) -> bool:
        """The ready server's port is still held by our child (it may have died and the
        port been taken since): checked before each request, so no key or text follows a
        port to another program."""
        process = self.process
        if process is None or process.returncode is not None or not self.url:
            return False
        owner = port_owner(httpx.URL(self.url).port or 0, process.pid)
        return owner.verdict in ("ours", "unknown")

    def _log_since(self, offset: int) -> str:
        try:
            with self.log_path.open("rb") as handle:
                handle.seek(offset)
                return handle.read(64_000).decode("utf-8", "replace")
        except OSError:
            return ""

    async def _watch(self) -> int:
        """Until the process exits; a server that stops answering ``/health`` (hung, or
        stopped with SIGSTOP) is killed, so that the loop starts a new one."""
        process = self.process
        assert process is not None
        waiting = asyncio.ensure_future(process.wait())
        misses = 0
        self._hung = 0
        headers = {"Authorization": f"Bearer {self.api_key}"}
        try:
            async with httpx.AsyncClient(
                timeout=self.health_timeout_s, trust_env=False, headers=headers
            ) as client:
                while not await self._exited(waiting):
                    if not self.still_ours():  # ask no one else on its port
                        if process.returncode is None:
                            log.warning(
                                "managed llama-server '%s' no longer holds its port: killing it",
                                self.name,
                            )
                            with contextlib.suppress(ProcessLookupError):
                                process.kill()
                        break
                    try:
                        await client.get(f"{self.url}/health")
                        misses = 0  # any answer: it is not hung (busy is fine)
                    except httpx.HTTPError:
                        misses += 1
                    if misses >= self.health_misses and process.returncode is None:
                        self._hung = misses
                        log.warning(
                            "managed llama-server '%s' did not answer /health %d times: killing it",
                            self.name,
                            misses,
                        )
                        with contextlib.suppress(ProcessLookupError):
                            process.kill()
        finally:
            if not waiting.done():
                waiting.cancel()
        code = await waiting
        log.warning("managed llama-server '%s' exited with code %s", self.name, code)
        return code

    async def _exited(self, waiting: asyncio.Future[int]) -> bool:
        done, _ = await asyncio.wait({waiting}, timeout=self.health_every_s)
        return bool(done)

    async def _stop_process(self) -> None:
        process, self.process = self.process, None
        if process is None or process.returncode is not None:
            return
        if process.stdin is not None:  # a guard: closing its pipe makes it stop the server
            process.stdin.close()
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(STOP_GRACE_S):
                await process.wait()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
