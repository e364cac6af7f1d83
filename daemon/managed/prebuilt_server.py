"""``python -m anyfill.daemon.managed.prebuilt_server``: llama.cpp's HTTP server from the
xllamacpp wheel (the ``local`` extra), started like ``llama-server``.

It takes the subset of llama-server's arguments the supervisor passes (model, host, port,
context, key file, threads, GPU layers), so the supervisor runs it as it runs the compiled
server: its own child process, on the port and with the key the supervisor chose, watched
through ``/health``. xllamacpp's ``Server`` serves over HTTP from its own threads once it is
built; this process then only waits for SIGTERM or SIGINT.

An argument it does not know (``server.args`` written for llama-server) stops it with a
message naming it, exit code 2; a model that does not load, exit code 1.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

EXIT_USAGE = 2


def _say(line: str) -> None:
    """To the log the supervisor gave as stderr (its last line is quoted on a failure)."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse's own text, said as ours
        _say(
            f"anyfill prebuilt runtime: {message}; it takes only the arguments anyfill passes "
            "(server.args are for a compiled llama-server: remove them, or install one)"
        )
        raise SystemExit(EXIT_USAGE)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="anyfill-prebuilt-server", add_help=False, allow_abbrev=False)
    parser.add_argument("--version", action="store_true")
    parser.add_argument("--model", "-m")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--ctx-size", "-c", type=int, default=4096)
    parser.add_argument("--api-key-file")
    parser.add_argument("--threads", "-t", type=int, default=0)
    parser.add_argument("--n-gpu-layers", "-ngl", type=int, default=-1)
    return parser


def _serve(options: argparse.Namespace) -> int:
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = options.model
    params.hostnames = [options.host]
    params.port = options.port
    params.n_ctx = options.ctx_size
    params.ui = False
    if options.threads:
        params.cpuparams.n_threads = options.threads
        params.cpuparams_batch.n_threads = options.threads
    params.n_gpu_layers = options.n_gpu_layers
    if options.api_key_file:
        keys = Path(options.api_key_file).read_text().split()
        params.api_keys = keys
    # Block the stop signals before the server's threads start (they inherit the mask), so
    # that only sigwait below receives them.
    stops = {signal.SIGTERM, signal.SIGINT}
    if sys.platform != "win32":  # Windows has no signal masks: TerminateProcess stops it
        signal.pthread_sigmask(signal.SIG_BLOCK, stops)
    try:
        server = xllamacpp.Server(params)
    except RuntimeError as exc:
        _say(
            f"anyfill prebuilt runtime: llama.cpp could not start ({exc}): see the lines "
            f"above (is {options.model} a GGUF model, is port {options.port} free?)"
        )
        return 1
    _say(
        f"anyfill prebuilt runtime: xllamacpp {xllamacpp.__version__} serving "
        f"{options.model} at {server.listening_address}"
    )
    if sys.platform == "win32":
        threading.Event().wait()  # until the supervisor terminates the process
        return 0
    received = signal.sigwait(stops)
    _say(f"anyfill prebuilt runtime: stopping ({signal.Signals(received).name})")
    return 0


def main(argv: list[str] | None = None) -> int:
    options = _parser().parse_args(argv)
    if options.version:
        from importlib import metadata

        sys.stdout.write(f"version: xllamacpp {metadata.version('xllamacpp')}\n")
        return 0
    if not options.model:
        _parser().error("--model is required")
    return _serve(options)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip the interpreter's teardown: xllamacpp's server threads are not joined by it,
    # and the process is done.
    os._exit(code)
