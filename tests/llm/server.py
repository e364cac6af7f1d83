"""Run a real llama.cpp ``llama-server`` for tests.

The binary and models come from ``.ci/llama-server.sh``, whose last stdout line
(the asset dir) ``.ci/run`` exports as ``ANYFILL_LLAMA_ASSETS``. Without it,
:func:`find_assets` returns ``None`` and tests skip with :data:`SKIP_REASON`.

    assets = find_assets()
    with LlamaServer(assets / TINY_FIM_MODEL) as srv:
        urllib.request.urlopen(srv.url + "/health")

The server listens on 127.0.0.1 only, on a free port picked at start.
"""

from __future__ import annotations

import functools
import os
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

ASSETS_ENV = "ANYFILL_LLAMA_ASSETS"
SERVER_BINARY = "llama-server"
SMOLLM2_MODEL = "smollm2-135m.gguf"  # SmolLM2-135M-Instruct Q4_1: ChatML, no FIM tokens
TINY_FIM_MODEL = "tiny-fim.gguf"  # random weights, StarCoder tokenizer with FIM tokens
REQUIRED_FILES = (SERVER_BINARY, SMOLLM2_MODEL, TINY_FIM_MODEL)
SKIP_REASON = (
    f"no llama-server assets: set {ASSETS_ENV} to the last line printed by "
    "`bash .ci/llama-server.sh` (builds llama-server once, ~11 min, cached)"
)
HOST = "127.0.0.1"


def find_assets() -> Path | None:
    """The asset dir from ``$ANYFILL_LLAMA_ASSETS``, or None if unset or incomplete."""
    value = os.environ.get(ASSETS_ENV, "").strip()
    if not value:
        return None
    path = Path(value)
    if not all((path / name).is_file() for name in REQUIRED_FILES):
        return None
    return path


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


@functools.cache
def _help_text(binary: str) -> str:
    try:
        out = subprocess.run(
            [binary, "--help"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout + out.stderr


class LlamaServerError(RuntimeError):
    """The server did not become ready."""


class LlamaServer:
    """``llama-server`` on a free loopback port; a context manager.

    ``url`` is ``http://127.0.0.1:PORT``. ``log_path`` holds the server's
    stdout+stderr while it runs (removed at exit unless ``keep_log``).
    """

    def __init__(
        self,
        model: Path | str,
        *,
        binary: Path | str | None = None,
        ctx_size: int = 2048,
        parallel: int = 2,
        threads: int = 1,
        extra_args: Sequence[str] = (),
        ready_timeout: float = 60.0,
        stop_grace: float = 5.0,
        keep_log: bool = False,
    ) -> None:
        self.model = Path(model)
        if binary is None:
            binary = self.model.parent / SERVER_BINARY
        self.binary = Path(binary)
        self.ctx_size = ctx_size
        self.parallel = parallel
        self.threads = threads
        self.extra_args = tuple(extra_args)
        self.ready_timeout = ready_timeout
        self.stop_grace = stop_grace
        self.keep_log = keep_log
        self.port = 0
        self.log_path: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        if self._proc is None:
            raise RuntimeError("LlamaServer is not running")
        return f"http://{HOST}:{self.port}"

    def command(self, port: int) -> list[str]:
        cmd = [
            str(self.binary),
            "-m", str(self.model),
            "--host", HOST,
            "--port", str(port),
            "-c", str(self.ctx_size),
            "-np", str(self.parallel),
            # One thread by default: on the shared 2-core machine under load, llama-server's
            # default threads spin against each other (one /infill took 8.5 s instead of
            # 20 ms at load 11; the SmolLM2 chat test timed out at load 17).
            "-t", str(self.threads),
        ]  # fmt: skip
        if "--no-webui" in _help_text(str(self.binary)):
            cmd.append("--no-webui")
        cmd.extend(self.extra_args)
        return cmd

    def log_tail(self, lines: int = 40) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        text = self.log_path.read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def start(self) -> LlamaServer:
        if self._proc is not None:
            raise RuntimeError("LlamaServer already started")
        if not self.binary.is_file():
            raise LlamaServerError(f"no llama-server binary at {self.binary}")
        if not self.model.is_file():
            raise LlamaServerError(f"no model at {self.model}")
        fd, log_name = tempfile.mkstemp(prefix="llama-server-", suffix=".log")
        os.close(fd)
        self.log_path = Path(log_name)
        # A port picked free can be taken before the server binds it: retry then.
        for attempt in range(3):
            self.port = _free_port()
            with open(self.log_path, "ab") as log:
                self._proc = subprocess.Popen(
                    self.command(self.port),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            try:
                self._wait_ready()
                return self
            except LlamaServerError:
                exited = self._proc.poll() is not None
                bind_failed = "bind" in self.log_tail(10).lower()
                self.stop()
                if not (exited and bind_failed and attempt < 2):
                    raise
        raise AssertionError("unreachable")

    def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.ready_timeout
        health = f"http://{HOST}:{self.port}/health"
        last = "no answer"
        while time.monotonic() < deadline:
            code = self._proc.poll()
            if code is not None:
                raise LlamaServerError(
                    f"llama-server exited with {code} before ready\n"
                    f"command: {' '.join(self.command(self.port))}\n"
                    f"log tail ({self.log_path}):\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(health, timeout=2) as resp:
                    if resp.status == 200:
                        return
                    last = f"HTTP {resp.status}"
            except urllib.error.HTTPError as e:  # 503 while the model loads
                last = f"HTTP {e.code}"
                e.close()
            except (urllib.error.URLError, OSError) as e:
                last = str(e)
            time.sleep(0.1)
        raise LlamaServerError(
            f"llama-server not ready after {self.ready_timeout:.0f} s (last /health: {last})\n"
            f"log tail ({self.log_path}):\n{self.log_tail()}"
        )

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=self.stop_grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
        if self.log_path is not None and not self.keep_log and exc_type is None:
            self.log_path.unlink(missing_ok=True)
