"""Values `config validate` accepts must work, and a file is read within bounds (issue 9)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from anyfill.config.model import BackendConfig
from anyfill.config.secrets import resolve_api_key
from anyfill.config.store import (
    MAX_CONFIG_BYTES,
    InvalidConfig,
    load_settings,
    parse_settings,
    shown_settings,
)
from anyfill.daemon.errors import ConfigError

LOCAL = '[routing]\ndefault = ["local"]\n[[backends]]\nname = "local"\ntype = "llamacpp"\nurl = "http://127.0.0.1:8080"\n'


def test_a_byte_order_mark_is_no_key(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_bytes(b"\xef\xbb\xbf" + LOCAL.encode())
    assert load_settings(path, environ={}).backends[0].name == "local"


@pytest.mark.parametrize("value", ["inf", "nan", "+inf"])
def test_infinite_timeouts_are_refused(value: str) -> None:
    with pytest.raises(InvalidConfig) as info:
        parse_settings(LOCAL + f"[backends.timeouts]\ntotal_s = {value}\n", environ={})
    assert [p.key for p in info.value.problems] == ["backends[0].timeouts.total_s"]


@pytest.mark.parametrize(
    ("header", "says"),
    [
        ('X-Token = "a\\r\\nInjected: yes"', "line break"),
        ('X-Token = "naïve ✓"', "Latin-1"),
        ('"Bad Name" = "x"', "not an HTTP header name"),
    ],
)
def test_headers_that_cannot_go_on_the_wire_are_refused(header: str, says: str) -> None:
    with pytest.raises(InvalidConfig) as info:
        parse_settings(LOCAL + f"[backends.headers]\n{header}\n", environ={})
    assert says in str(info.value)


@pytest.mark.parametrize("option", ['max_stop = "four"', "max_stop = 2.5", "native_suffix = 3"])
def test_options_anyfill_reads_must_have_their_type(option: str) -> None:
    with pytest.raises(InvalidConfig) as info:
        parse_settings(LOCAL + f"[backends.options]\n{option}\n", environ={})
    assert [p.key for p in info.value.problems] == ["backends[0].options"]


def test_a_huge_wrong_value_is_not_echoed_in_full() -> None:
    huge = "x" * 10_000_000
    with pytest.raises(InvalidConfig) as info:
        parse_settings(LOCAL + f'max_tokens = "{huge}"\n', environ={})
    assert len(str(info.value)) < 500
    assert "10000002 characters" in str(info.value)


def test_a_fifo_config_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "config.toml"
    os.mkfifo(fifo)
    started = time.monotonic()
    with pytest.raises(ConfigError, match="not a regular file"):
        load_settings(fifo, environ={})
    assert time.monotonic() - started < 5


def test_a_device_config_is_refused() -> None:
    with pytest.raises(ConfigError, match="not a regular file"):
        load_settings(Path("/dev/zero"), environ={})


def test_a_huge_config_is_refused_without_reading_it(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    with path.open("wb") as handle:
        handle.truncate(100 * 2**20)  # sparse: 100 MB that costs nothing to make
    with pytest.raises(ConfigError, match="at most 1 MiB"):
        load_settings(path, environ={})
    assert MAX_CONFIG_BYTES == 2**20


def test_config_show_masks_credential_headers_and_options() -> None:
    settings = parse_settings(
        LOCAL
        + '[backends.headers]\nAuthorization = "Bearer s3cret-token"\nX-Trace = "visible"\n'
        + '[backends.options]\napi_key = "opt-s3cret"\nseed = 4\n',
        environ={},
    )
    shown = shown_settings(settings)["backends"][0]
    assert shown["headers"] == {"Authorization": "***", "X-Trace": "visible"}
    assert shown["options"] == {"api_key": "***", "seed": 4}


# -- a key goes only where the user meant it ---------------------------------------------


def backend(type_name: str, url: str, **extra: object) -> BackendConfig:
    return BackendConfig(name="b", type=type_name, url=url, **extra)  # type: ignore[arg-type]


@pytest.mark.usefixtures("file_keyring")
def test_openai_key_from_the_environment_stays_with_openai() -> None:
    environ = {"OPENAI_API_KEY": "sk-live-0123456789abcdef"}
    local = backend("openai-completions", "http://127.0.0.1:8080/v1")
    assert resolve_api_key(local, environ) is None
    official = backend("openai-completions", "https://api.openai.com/v1")
    assert resolve_api_key(official, environ) == environ["OPENAI_API_KEY"]
    named = backend("openai-completions", "http://127.0.0.1:8080/v1", key_env="OPENAI_API_KEY")
    assert resolve_api_key(named, environ) == environ["OPENAI_API_KEY"]


@pytest.mark.usefixtures("file_keyring")
def test_a_local_chat_server_needs_no_key() -> None:
    assert resolve_api_key(backend("openai-chat", "http://127.0.0.1:8080/v1"), {}) is None


@pytest.mark.usefixtures("file_keyring")
@pytest.mark.parametrize("type_name", ["openai-chat", "anthropic", "gemini", "mistral-fim"])
def test_no_key_in_clear_text_to_another_host(type_name: str) -> None:
    environ = {"MY_KEY": "k-0123456789"}
    remote = backend(type_name, "http://10.1.2.3:8000", key_env="MY_KEY")
    with pytest.raises(ConfigError, match=r"unencrypted over http:// to 10\.1\.2\.3"):
        resolve_api_key(remote, environ)
    opted_in = backend(
        type_name, "http://10.1.2.3:8000", key_env="MY_KEY", allow_insecure_http=True
    )
    assert resolve_api_key(opted_in, environ) == "k-0123456789"
    for url in ("https://10.1.2.3:8000", "http://127.0.0.1:8000", "http://localhost:8000"):
        assert resolve_api_key(backend(type_name, url, key_env="MY_KEY"), environ)


@pytest.mark.parametrize("type_name", ["openai-chat", "anthropic", "gemini", "mistral-fim"])
async def test_no_backend_is_built_with_a_key_for_plain_http_to_another_host(
    type_name: str,
) -> None:
    """Whoever hands the key (the keyring, the environment, a field typed in the panel):
    the one place every backend is built refuses it (issue 24)."""
    import httpx

    from anyfill.daemon.backends.registry import create_backend

    async with httpx.AsyncClient() as client:
        with pytest.raises(ConfigError, match=r"unencrypted over http:// to 10\.1\.2\.3"):
            create_backend(backend(type_name, "http://10.1.2.3:8000"), client, "k-0123456789")
        opted_in = backend(type_name, "http://10.1.2.3:8000", allow_insecure_http=True)
        assert create_backend(opted_in, client, "k-0123456789") is not None
        assert create_backend(backend(type_name, "https://10.1.2.3:8000"), client, "k-0123456789")


@given(st.text(min_size=1, max_size=30))
def test_any_header_value_validate_accepts_is_one_http_can_carry(value: str) -> None:
    try:
        config = backend("llamacpp", "http://127.0.0.1:1", headers={"X-A": value})
    except ValueError:
        return
    encoded = config.headers["X-A"].encode("latin-1")
    assert b"\r" not in encoded
    assert b"\n" not in encoded
