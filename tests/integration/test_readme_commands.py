"""The README's commands, run as written (issue #25).

Every command line of README.md's fenced ``sh`` blocks is either run here, by ``sh -c`` with
the line's own text, or listed in ``NOT_RUN_HERE`` with the reason; a README line that is
neither fails ``test_every_readme_command_is_run_or_listed``, and a README edit that breaks a
command run here fails its test. Only two things are substituted: ``.venv/bin/`` becomes the
bin dir of the venv running the tests, and the backends' loopback URLs (the ``--url`` of
``complete``, and the urls in the config ``config init`` wrote) become loopback protocol
servers from tests/servers. ``anyfill config path``, which the README names in a comment, is
run too. Each test has a fresh HOME and XDG dirs, no display, no session
bus and no ``ANYFILL_*`` variables, so the user's own config and servers stay out.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.llm.server import TINY_FIM_MODEL, find_assets
from tests.servers import LlamaCpp, Ollama, Reply
from tests.servers.fixtures import StartServer, loopback

__all__ = ["loopback"]

README = Path(__file__).resolve().parents[2] / "README.md"
BIN = Path(sys.executable).parent
LLAMACPP_URL = "http://127.0.0.1:8080"  # the default config's and the README's llama.cpp
OLLAMA_URL = "http://127.0.0.1:11434"  # the default config's Ollama

NOT_RUN_HERE = {
    "scripts/setup --local && .venv/bin/anyfill run": (
        "builds llama-server (minutes) and starts the tray: needs a desktop session"
    ),
    "scripts/setup --dev && scripts/test": "installs apt packages as root and runs every test",
    "pipx install .": "tests/packaging/test_install_commands.py",
    "pipx install git+REPOSITORY-URL": (
        "tests/packaging/test_install_commands.py, with this checkout's git+file:// URL"
    ),
    "pip wheel --no-deps -w dist .": "tests/packaging/test_install_commands.py",
    "pip install 'dist/anyfill-0.1.0-py3-none-any.whl[local]'": (
        "tests/packaging/test_bundle.py and test_local_extra.py"
    ),
    ".venv/bin/anyfill run": (
        "the tray, hotkeys and popup: needs a desktop (tests/e2e/test_tray.py)"
    ),
    ".venv/bin/anyfill settings": (
        "the Qt settings panel: needs a display (tests/e2e/test_settings_desktop.py)"
    ),
    ".venv/bin/anyfill model pull": (
        "asks at the terminal, then downloads from the Hugging Face Hub (network)"
    ),
    ".venv/bin/anyfill eval --backend local --backend cloud --execute --out eval/": (
        "needs backends named local and cloud (a cloud API key) and runs 1033 problems"
    ),
}


def readme_commands() -> list[tuple[str, str]]:
    """(command, comment) for every line of the README's ```sh blocks."""
    commands: list[tuple[str, str]] = []
    in_sh = False
    for line in README.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_sh = not in_sh and line.strip() == "```sh"
            continue
        if in_sh and line.strip():
            command, _, comment = line.partition("  #")
            commands.append((command.strip(), comment.strip().lstrip("#").strip()))
    return commands


def readme(command: str) -> str:
    """``command`` as the README writes it (the test fails when the README no longer does)."""
    written = [c for c, _ in readme_commands()]
    assert command in written, f"the README no longer has {command!r}"
    return command


def as_run_here(command: str, urls: dict[str, str] | None = None) -> str:
    line = command.replace(".venv/bin/", f"{BIN}/")
    for readme_url, url in (urls or {}).items():
        line = line.replace(readme_url, url)
    return line


RUN_HERE: set[str] = set()


def runs(command: str) -> str:
    RUN_HERE.add(command)
    return command


CONFIG_INIT = runs(".venv/bin/anyfill config init")
CONFIG_VALIDATE = runs(".venv/bin/anyfill config validate")
DOCTOR = runs(".venv/bin/anyfill doctor")
MODEL_LIST = runs(".venv/bin/anyfill model list")
MODEL_USE = runs(".venv/bin/anyfill model use qwen2.5-coder-0.5b")
MODEL_RM = runs(".venv/bin/anyfill model rm qwen2.5-coder-1.5b")
PRINTF = runs("printf 'def add(a, b):\\n    return <|cursor|>\\n' > doc.py")
COMPLETE_URL = runs(".venv/bin/anyfill complete doc.py --type llamacpp --url " + LLAMACPP_URL)
COMPLETE_JSON = runs(".venv/bin/anyfill complete doc.py --backend ollama --json")
COMPLETE_JSONL = runs(".venv/bin/anyfill complete --jsonl holes.jsonl")
DOCTOR_ON_PATH = runs("anyfill doctor")  # the install block's, with anyfill on PATH
AUTOSTART = runs("anyfill autostart enable")


@dataclass
class Ran:
    code: int
    out: str
    err: str


@pytest.fixture
def home(tmp_path: Path) -> dict[str, str]:
    """A fresh home: the environment every command runs in (cwd is the home too)."""
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("ANYFILL_", "XDG_", "HF_"))
        and key not in {"DISPLAY", "WAYLAND_DISPLAY", "DBUS_SESSION_BUS_ADDRESS"}
        and "API_KEY" not in key
    }
    env.update(
        HOME=str(tmp_path),
        XDG_RUNTIME_DIR=str(runtime),
        PYTHON_KEYRING_BACKEND="keyring.backends.null.Keyring",
    )
    return env


def sh(command: str, env: dict[str, str], urls: dict[str, str] | None = None) -> Ran:
    done = subprocess.run(
        ["sh", "-c", as_run_here(command, urls)],
        cwd=env["HOME"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return Ran(done.returncode, done.stdout, done.stderr)


async def sh_async(command: str, env: dict[str, str], urls: dict[str, str] | None = None) -> Ran:
    """``sh`` for a command whose loopback server runs on this test's event loop."""
    proc = await asyncio.create_subprocess_exec(
        "sh",
        "-c",
        as_run_here(command, urls),
        cwd=env["HOME"],
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return Ran(proc.returncode, out.decode(), err.decode())


def doctor_topics(out: str) -> dict[str, str]:
    """topic -> ok/warn/fail from doctor's lines ("fail desktop   DISPLAY is not set...")."""
    found = (
        re.match(r"(ok|warn|fail) +(\S+(?: \S+)*?)(?:  +|$)", line) for line in out.splitlines()
    )
    return {m[2]: m[1] for m in found if m}


def test_every_readme_command_is_run_or_listed() -> None:
    written = [c for c, _ in readme_commands()]
    assert written, "no ```sh block found in the README"
    unaccounted = [c for c in written if c not in RUN_HERE and c not in NOT_RUN_HERE]
    assert not unaccounted, f"README commands neither run here nor listed: {unaccounted}"
    # The "model use" line's comment names a second command, run here too.
    comments = dict(readme_commands())
    assert comments[MODEL_USE] == "or: model use ~/models/any-fim-model.gguf"
    stale = sorted((RUN_HERE | set(NOT_RUN_HERE)) - set(written))
    assert not stale, f"listed here but no longer in the README: {stale}"


def test_config_block(home: dict[str, str]) -> None:
    config = Path(home["HOME"]) / ".config" / "anyfill" / "config.toml"
    init = sh(readme(CONFIG_INIT), home)
    assert init.code == 0, init.err
    assert init.out.strip() == f"wrote {config}"
    text = config.read_text()
    assert text.count("\n#") > 10, "not a commented config file"
    # "see `anyfill config path`": the README's inline command names the same file.
    assert "`anyfill config path`" in README.read_text()
    path = sh("anyfill config path", home | {"PATH": f"{BIN}:{home['PATH']}"})
    assert (path.code, path.out) == (0, f"{config}\n"), path.err

    validate = sh(readme(CONFIG_VALIDATE), home)
    assert (validate.code, validate.out) == (0, f"{config}: ok\n"), validate.err
    # "errors name the line and the key"
    lines = len(text.splitlines())
    config.write_text(text + "bogus_key = 1\n")
    broken = sh(readme(CONFIG_VALIDATE), home)
    assert broken.code == 2
    assert f"{config}:{lines + 1}:" in broken.err
    assert "unknown key 'bogus_key'" in broken.err
    config.write_text(text)

    # "is each backend answering, is there a display, a keyring?"
    doctor = sh(readme(DOCTOR), home)
    topics = doctor_topics(doctor.out)
    for topic in ("backend llamacpp", "backend ollama", "desktop", "keyring", "verdict"):
        assert topic in topics, doctor.out
    assert topics["desktop"] == "fail"  # no DISPLAY here
    assert topics["keyring"] == "ok"
    assert doctor.out.splitlines()[-1].split()[:2] == ["fail", "verdict"], doctor.out
    assert "cannot work until the 'fail' lines are fixed" in doctor.out.splitlines()[-1]
    assert doctor.code == 1, doctor.err


def test_model_block(home: dict[str, str]) -> None:
    assets = find_assets()
    if assets is None:
        pytest.skip("set ANYFILL_LLAMA_ASSETS (scripts/test does) for the tests' tiny model")
    root = Path(home["HOME"])
    config = root / ".config" / "anyfill" / "config.toml"
    assert sh(readme(CONFIG_INIT), home).code == 0

    listed = sh(readme(MODEL_LIST), home)
    assert listed.code == 0, listed.err
    assert re.search(r"qwen2\.5-coder-1\.5b .*not downloaded.*<- used by 'managed'", listed.out)
    assert re.search(r"qwen2\.5-coder-0\.5b .*not downloaded", listed.out)

    use = sh(readme(MODEL_USE), home)
    assert use.code == 0, use.err
    assert "'managed' now runs qwen2.5-coder-0.5b" in use.out
    assert "anyfill model pull qwen2.5-coder-0.5b" in use.out  # it says it is not downloaded
    assert re.search(r"qwen2\.5-coder-0\.5b .*<- used by 'managed'", sh(MODEL_LIST, home).out)

    # The comment's other form, with the tests' tiny FIM model copied to
    # ~/models/any-fim-model.gguf (a symlink would be resolved to its target).
    (root / "models").mkdir()
    shutil.copyfile(assets / TINY_FIM_MODEL, root / "models" / "any-fim-model.gguf")
    other = dict(readme_commands())[readme(MODEL_USE)].removeprefix("or: ")
    use_path = sh(f".venv/bin/anyfill {other}", home)
    assert use_path.code == 0, use_path.err
    model_file = root / "models" / "any-fim-model.gguf"
    assert f"'managed' now runs {model_file}" in use_path.out
    assert f'model = "{model_file}"' in config.read_text()
    assert re.search(
        re.escape(str(model_file)) + r" +\(present\) +<- used by 'managed'",
        sh(MODEL_LIST, home).out,
    )
    assert sh(readme(CONFIG_VALIDATE), home).code == 0

    models = root / ".cache" / "anyfill" / "models"
    models.mkdir(parents=True)
    kept = models / "qwen2.5-coder-0.5b-q8_0.gguf"
    kept.write_bytes(b"other model")
    downloaded = models / "qwen2.5-coder-1.5b-q8_0.gguf"
    downloaded.write_bytes(b"x" * 4096)
    rm = sh(readme(MODEL_RM), home)
    assert rm.code == 0, rm.err
    assert rm.out.startswith("removed qwen2.5-coder-1.5b"), rm.out
    assert not downloaded.exists()
    assert kept.exists()


async def test_complete_block(loopback: StartServer, home: dict[str, str]) -> None:
    root = Path(home["HOME"])
    llama = await loopback(LlamaCpp(default=Reply(text="a + b")))
    ollama = await loopback(Ollama(default=Reply(text="a + b")))
    urls = {LLAMACPP_URL: llama.url, OLLAMA_URL: ollama.url}

    printf = await sh_async(readme(PRINTF), home)
    assert printf.code == 0, printf.err
    assert (root / "doc.py").read_text() == "def add(a, b):\n    return <|cursor|>\n"

    # "prints only the missing text": the middle, nothing before or after it (no newline).
    complete = await sh_async(readme(COMPLETE_URL), home, urls)
    assert (complete.code, complete.out) == (0, "a + b"), complete.err
    body = llama.requests[-1].json()
    assert body["input_prefix"] == "def add(a, b):\n    return "
    assert body["input_suffix"] == "\n"

    # --backend and --jsonl use the config: the one `config init` writes, its default
    # servers' URLs pointed at the loopback servers.
    assert (await sh_async(readme(CONFIG_INIT), home)).code == 0
    config = root / ".config" / "anyfill" / "config.toml"
    text = config.read_text()
    assert LLAMACPP_URL in text
    assert OLLAMA_URL in text
    for readme_url, url in urls.items():
        text = text.replace(readme_url, url)
    config.write_text(text)

    as_json = await sh_async(readme(COMPLETE_JSON), home)
    assert as_json.code == 0, as_json.err
    info = json.loads(as_json.out)  # "+ backend, mode, template, timing, raw text"
    assert info["middle"] == "a + b"
    assert info["backend"] == "ollama"
    assert {"mode", "template", "ms", "raw"} <= info.keys(), info
    assert ollama.requests[-1].path == "/api/generate"

    holes = [
        {"id": "add", "prefix": "def add(a, b):\n    return ", "suffix": "\n"},
        {"id": 2, "prefix": "x = ", "suffix": ""},
    ]
    (root / "holes.jsonl").write_text("".join(json.dumps(h) + "\n" for h in holes))
    jsonl = await sh_async(readme(COMPLETE_JSONL), home)
    assert jsonl.code == 0, jsonl.err
    answers = [json.loads(line) for line in jsonl.out.splitlines()]
    assert [(a["id"], a["line"], a["middle"], a["error"]) for a in answers] == [
        ("add", 1, "a + b", None),
        (2, 2, "a + b", None),
    ]
    assert {a["backend"] for a in answers} == {"llamacpp"}  # the first in the default chain


def test_install_block_commands_that_need_anyfill_on_path(home: dict[str, str]) -> None:
    on_path = home | {"PATH": f"{BIN}:{home['PATH']}"}
    root = Path(home["HOME"])
    before = doctor_topics(sh(readme(DOCTOR_ON_PATH), on_path).out)
    assert before["autostart"] == "ok"
    assert before["verdict"] == "fail"  # no display here

    # "start with your session; adds anyfill to the menu"
    enable = sh(readme(AUTOSTART), on_path)
    assert enable.code == 0, enable.err
    session = root / ".config" / "autostart" / "anyfill.desktop"
    menu = root / ".local" / "share" / "applications" / "anyfill.desktop"
    for entry in (session, menu):
        assert f"Exec={BIN}/anyfill run\n" in entry.read_text(), entry
    doctor = sh(readme(DOCTOR_ON_PATH), on_path)
    assert re.search(rf"^ok +autostart +xdg \({re.escape(str(session))}\)$", doctor.out, re.M)
    assert doctor.code == 1  # the verdict is still "fail": no display
