"""Every setting of anyfill as pydantic models.

Unknown keys are errors (``extra="forbid"``) so a typo never silently does nothing.
The same models validate the TOML file, environment overrides and the settings panel.
"""

from __future__ import annotations

import re
import socket
from typing import Annotated, Any, Literal

from pydantic import (
    AnyHttpUrl,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationInfo,
    field_validator,
    model_validator,
)

SCHEMA_VERSION = 1

#: The model a managed llama-server runs unless the user picks another (``anyfill model``).
DEFAULT_MANAGED_MODEL = "qwen2.5-coder-1.5b"

BackendType = Literal[
    "llamacpp",
    "llamacpp-managed",
    "ollama",
    "openai-completions",
    "mistral-fim",
    "openai-chat",
    "anthropic",
    "gemini",
    "mqtt",
]

BACKEND_TYPES: tuple[str, ...] = BackendType.__args__  # type: ignore[attr-defined]

#: Environment variable read for a backend's key when the keyring has none.
DEFAULT_KEY_ENV: dict[str, str] = {
    "mistral-fim": "MISTRAL_API_KEY",
    "openai-chat": "OPENAI_API_KEY",
    "openai-completions": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
    "gemini": "GEMINI_API_KEY",
}

#: Backend types that cannot work without a key (local servers usually need none).
KEY_REQUIRED_TYPES = frozenset({"mistral-fim", "openai-chat", "anthropic", "gemini"})

#: OpenAI-style types also speak to local servers (llama.cpp, vLLM, Ollama's /v1), which
#: need no key: the default variable (OPENAI_API_KEY) is read, and a key demanded, only for
#: OpenAI's own host. Elsewhere name the variable with ``key_env``.
OPENAI_HOSTS = frozenset({"api.openai.com"})
_OPENAI_TYPES = frozenset({"openai-chat", "openai-completions"})

_LOOPBACK = re.compile(r"^(localhost|127(\.\d{1,3}){3}|\[?::1\]?)$", re.I)
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


def url_host(url: str) -> str:
    """The lower-cased host of an http(s) URL ("" when there is none)."""
    match = re.match(r"^[a-z]+://(?:[^@/]*@)?(\[[^\]]*\]|[^:/?#]*)", url, re.I)
    return match.group(1).lower() if match else ""


def is_loopback(url: str) -> bool:
    return bool(_LOOPBACK.match(url_host(url)))


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_HOTKEY_PART = re.compile(r"^(<[a-z0-9_]+>|.)$")

_HTTP_URL: TypeAdapter[AnyHttpUrl] = TypeAdapter(AnyHttpUrl)
_BROKER_URL = re.compile(r"^mqtts?://([^@/\s]+@)?[^/@\s:]+(:\d{1,5})?/?$")
_POOL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def _check_broker_url(value: str) -> str:
    if not _BROKER_URL.match(value):
        raise ValueError("expected mqtt://[user@]host[:port] or mqtts://[user@]host[:port]")
    return value


class Section(BaseModel):
    """Base of every config table: unknown keys are errors, assignments are validated."""

    # strict: TOML has real types, so `max_tokens = true` is a mistake, not 1.
    # No inf/nan: an `inf` timeout passes "> 0" and then breaks every request.
    model_config = ConfigDict(
        extra="forbid", validate_assignment=True, strict=True, allow_inf_nan=False
    )


class Timeouts(Section):
    connect_s: float = Field(3.0, gt=0, description="TCP/TLS connect timeout.")
    first_token_s: float = Field(
        10.0, gt=0, description="Give up when no text arrived this long after sending."
    )
    total_s: float = Field(30.0, gt=0, description="Upper bound for one whole completion.")


class Limits(Section):
    """Client-side rate limits; 0 means unlimited."""

    requests_per_minute: int = Field(0, ge=0)
    tokens_per_minute: int = Field(0, ge=0)
    max_concurrent: int = Field(2, ge=1, le=256)


class Price(Section):
    """Price in the user's currency per million tokens, for the cost shown in the tray."""

    input_per_mtok: float = Field(0.0, ge=0)
    output_per_mtok: float = Field(0.0, ge=0)


ManagedStart = Literal["daemon", "request"]

#: The URL of a managed server whose port anyfill picks (a free one at each start).
MANAGED_DEFAULT_URL = "http://127.0.0.1:0"
_LOOPBACK_HOSTS = ("127.0.0.1", "localhost")


class ManagedServerConfig(Section):
    """How anyfill runs ``llama-server`` itself (backend type ``llamacpp-managed``)."""

    binary: str = Field(
        "",
        description="llama-server to run; empty: PATH, then the one 'scripts/setup --local' "
        "built, then the prebuilt runtime of anyfill[local].",
    )
    start: ManagedStart = Field(
        "daemon",
        description="'daemon': start with the daemon unless a backend before it in the chain "
        "answers; 'request': at the first request that reaches it.",
    )
    context_size: int = Field(4096, ge=256, le=1_048_576, description="Tokens of context (-c).")
    threads: int = Field(0, ge=0, le=1024, description="CPU threads (0: llama-server decides).")
    gpu_layers: int = Field(-1, ge=-1, description="Layers on the GPU (-ngl); -1: its default.")
    args: list[str] = Field(
        default_factory=list, description="Extra llama-server arguments, passed verbatim."
    )
    start_timeout_s: float = Field(
        120.0, gt=0, le=3600, description="Give up when the model is not loaded by then."
    )


class BackendConfig(Section):
    name: str = Field(description="How routing and the CLI refer to this backend.")
    type: BackendType
    url: str = Field(description="Base URL of the server, e.g. http://127.0.0.1:8080.")
    model: str = Field("", description="Model name sent to the server (empty: server default).")
    template: str = Field(
        "auto",
        description="FIM template for raw-prompt servers: a family name, or 'auto' (by model).",
    )
    key_env: str = Field(
        "", description="Environment variable holding the API key (fallback after the keyring)."
    )
    enabled: bool = True
    max_tokens: int = Field(128, ge=1, le=32768)
    temperature: float = Field(0.1, ge=0, le=2)
    stop: list[str] = Field(default_factory=list, description="Extra stop strings.")
    options: dict[str, Any] = Field(
        default_factory=dict, description="Extra request fields passed to the server verbatim."
    )
    headers: dict[str, str] = Field(default_factory=dict, description="Extra HTTP headers.")
    pool: str = Field(
        "",
        description="type 'mqtt' only: the worker pool to ask ('anyfill worker --pool NAME').",
    )
    allow_insecure_http: bool = Field(
        False,
        description="Send this backend's API key over plain http:// to a host that is not "
        "this machine (anyone on the network path can read it).",
    )
    timeouts: Timeouts = Field(default_factory=Timeouts)
    limits: Limits = Field(default_factory=Limits)
    price: Price = Field(default_factory=Price)
    server: ManagedServerConfig = Field(
        default_factory=ManagedServerConfig,
        description="Only for type 'llamacpp-managed': how anyfill runs llama-server.",
    )

    @model_validator(mode="before")
    @classmethod
    def _managed_url(cls, data: Any) -> Any:
        """A managed server needs no URL: anyfill picks a free loopback port."""
        if isinstance(data, dict) and data.get("type") == "llamacpp-managed" and "url" not in data:
            return {**data, "url": MANAGED_DEFAULT_URL}
        return data

    @model_validator(mode="after")
    def _managed_on_loopback(self) -> BackendConfig:
        if self.type == "llamacpp-managed":
            url = _HTTP_URL.validate_python(self.url)
            if url.scheme != "http" or url.host not in _LOOPBACK_HOSTS:
                raise ValueError(
                    "a managed llama-server listens on http://127.0.0.1 only; "
                    "leave url out (a free port) or write http://127.0.0.1:PORT"
                )
        return self

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(
                "use letters, digits, '-', '_' or '.', starting with a letter or digit"
            )
        return value

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str, info: ValidationInfo) -> str:
        if info.data.get("type") == "mqtt":
            return _check_broker_url(value).rstrip("/")
        _HTTP_URL.validate_python(value)
        return value.rstrip("/")

    @model_validator(mode="after")
    def _pool_for_mqtt(self) -> BackendConfig:
        if self.type == "mqtt" and not _POOL.match(self.pool):
            raise ValueError(
                "a backend of type 'mqtt' needs pool = NAME (letters, digits, '-', '_', '.')"
            )
        return self

    @field_validator("headers")
    @classmethod
    def _check_headers(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            if not _HEADER_NAME.match(name):
                raise ValueError(f"{name[:40]!r} is not an HTTP header name")
            if any(ch in text for ch in "\r\n\0"):
                raise ValueError(f"header {name!r}: a value cannot hold a line break")
            try:
                text.encode("latin-1")
            except UnicodeEncodeError:
                raise ValueError(
                    f"header {name!r}: HTTP header values are Latin-1 text; this one has "
                    "other characters"
                ) from None
        return value

    @field_validator("options")
    @classmethod
    def _check_options(cls, value: dict[str, Any]) -> dict[str, Any]:
        max_stop = value.get("max_stop")
        if max_stop is not None and (type(max_stop) is not int or max_stop < 0):
            raise ValueError(f"options.max_stop is a whole number >= 0; found {max_stop!r}")
        native = value.get("native_suffix")
        if native is not None and native not in ("auto", True, False):
            raise ValueError(f'options.native_suffix is "auto", true or false; found {native!r}')
        return value

    @property
    def _openai_elsewhere(self) -> bool:
        return self.type in _OPENAI_TYPES and url_host(self.url) not in OPENAI_HOSTS

    @property
    def api_key_env(self) -> str:
        """The environment variable consulted for this backend's key."""
        if self.key_env:
            return self.key_env
        return "" if self._openai_elsewhere else DEFAULT_KEY_ENV.get(self.type, "")

    @property
    def needs_key(self) -> bool:
        return self.type in KEY_REQUIRED_TYPES and not self._openai_elsewhere


class RoutingConfig(Section):
    default: list[str] = Field(
        default_factory=lambda: ["llamacpp", "ollama", "managed"],
        description="Backends tried in order for a completion.",
    )
    fallback: bool = Field(True, description="Try the next backend when one fails.")
    hedge_after_ms: int = Field(
        0, ge=0, description="Start the next backend too when no first token came by then (0: off)."
    )


def _check_hotkey(value: str) -> str:
    parts = value.lower().split("+")
    if not value or any(not _HOTKEY_PART.match(part) for part in parts):
        raise ValueError(
            f"{value!r} is not a hotkey; write it like '<ctrl>+<alt>+<space>' or '<ctrl>+<shift>+f'"
        )
    return value.lower()


Hotkey = Annotated[str, Field(min_length=1)]


class HotkeysConfig(Section):
    complete: Hotkey = "<ctrl>+<alt>+<space>"
    preview: Hotkey = "<ctrl>+<alt>+<enter>"
    cancel: Hotkey = "<ctrl>+<alt>+<backspace>"
    modifier_release_timeout_ms: int = Field(
        1500, ge=0, le=10000, description="How long to wait for the user to let go of the keys."
    )

    @field_validator("complete", "preview", "cancel")
    @classmethod
    def _valid(cls, value: str) -> str:
        return _check_hotkey(value)

    @model_validator(mode="after")
    def _distinct(self) -> HotkeysConfig:
        # Modifiers may come in any order: one set of parts is one combination.
        seen: dict[frozenset[str], str] = {}
        for action in ("complete", "preview", "cancel"):
            value: str = getattr(self, action)
            combination = frozenset(value.split("+"))
            if combination in seen:
                raise ValueError(f"{action} and {seen[combination]} are both {value}")
            seen[combination] = action
        return self


CaptureStrategy = Literal["accessibility", "keyboard", "clipboard"]


class CaptureConfig(Section):
    strategies: list[CaptureStrategy] = Field(
        default_factory=lambda: list[CaptureStrategy](["accessibility", "keyboard"]),
        description="Tried in order until one answers.",
    )
    scope: Literal["document", "line"] = Field(
        "document",
        description="Keyboard capture selects to the document edges (robust) or line edges.",
    )
    max_prefix_chars: int = Field(4000, ge=0)
    max_suffix_chars: int = Field(1000, ge=0)
    copy_timeout_ms: int = Field(250, ge=10, le=5000)
    empty_timeout_ms: int = Field(
        60,
        ge=5,
        le=5000,
        description="How long to wait before deciding nothing was selected, in an app not "
        "seen yet; afterwards the wait follows what that app took on earlier presses.",
    )
    cursor_marker: str = Field("<|cursor|>", min_length=1)


InsertMode = Literal["paste", "type", "preview"]


class AppRule(Section):
    """Settings for the windows a rule matches: its class (``match``) and/or its title."""

    match: str = Field(
        "", description="Regular expression searched in WM_CLASS or the process name."
    )
    title: str = Field("", description="Regular expression searched in the window title.")
    disabled: bool = False
    mode: InsertMode | None = None
    capture: list[CaptureStrategy] | None = None
    paste_keys: str | None = None
    copy_keys: str | None = None
    backends: list[str] | None = Field(
        None, description="Backends tried for this application instead of routing.default."
    )
    context_title: bool | None = Field(
        None, description="Send the application name and window title as context ([context])."
    )
    context_fields: bool | None = Field(
        None, description="Send the window's other text fields as context ([context])."
    )
    context_accepted: bool | None = Field(
        None, description="Send completions recently accepted in this app as context."
    )
    context_clipboard: bool | None = Field(
        None, description="Send recent clipboard text as context (only with [context] clipboard)."
    )
    suggest: bool | None = Field(
        None,
        description="Suggestions as you type in this application (unset: suggestions.auto).",
    )

    @field_validator("match", "title")
    @classmethod
    def _regex(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from exc
        return value

    @model_validator(mode="after")
    def _matches_something(self) -> AppRule:
        if not self.match and not self.title:
            raise ValueError("a rule needs a window class pattern (match), a title, or both")
        return self

    @field_validator("paste_keys", "copy_keys")
    @classmethod
    def _keys(cls, value: str | None) -> str | None:
        return None if value is None else _check_hotkey(value)


def _default_app_rules() -> list[AppRule]:
    terminals = (
        r"(?i)^(xterm|uxterm|urxvt|gnome-terminal.*|konsole|xfce4-terminal|alacritty|kitty|"
        r"tilix|terminator|wezterm.*|foot|st-256color|lxterminal|mate-terminal|qterminal)$"
    )
    secrets = r"(?i)(keepassxc?|1password|bitwarden|pinentry.*|seahorse|kwalletmanager.*)"
    return [
        AppRule(
            match=terminals,
            capture=["clipboard"],
            paste_keys="<ctrl>+<shift>+v",
            copy_keys="<ctrl>+<shift>+c",
            suggest=False,
        ),
        AppRule(match=secrets, disabled=True, suggest=False),
    ]


class InsertConfig(Section):
    mode: InsertMode = "paste"
    type_max_chars: int = Field(
        0,
        ge=0,
        description="Type (instead of paste) ASCII completions up to this length (0: never).",
    )
    restore_clipboard: bool = True
    paste_keys: str = "<ctrl>+v"
    copy_keys: str = "<ctrl>+c"
    restore_timeout_ms: int = Field(
        1500, ge=50, le=10000, description="Restore the clipboard at the latest after this long."
    )
    verify: bool = Field(
        True,
        description="Read the text before the caret back after inserting (AT-SPI, or the "
        "keyboard capture's copy) and say 'inserted' only when the completion is there; "
        "otherwise the outcome is 'sent'.",
    )
    apps: list[AppRule] = Field(default_factory=_default_app_rules)

    @field_validator("paste_keys", "copy_keys")
    @classmethod
    def _keys(cls, value: str) -> str:
        return _check_hotkey(value)


class CompletionConfig(Section):
    single_line: Literal["auto", "always", "never"] = Field(
        "auto", description="'auto': one line when text follows the caret on its line."
    )
    max_prefix_chars: int = Field(4000, ge=1)
    max_suffix_chars: int = Field(1000, ge=0)


class ContextConfig(Section):
    """Context beyond the caret: chunks of related text sent with the prefix and suffix to
    backends that take them (llama.cpp ``input_extra``, repository-level FIM templates, the
    chat prompt). See docs/context.md."""

    enabled: bool = Field(True, description="Send any context beyond the text at the caret.")
    title: bool = Field(
        True, description="The application name and window title (never for terminals)."
    )
    fields: bool = Field(True, description="The window's other text fields (AT-SPI).")
    accepted: bool = Field(True, description="Completions recently accepted in the same app.")
    clipboard: bool = Field(
        False, description="Recent clipboard text. Off unless turned on: it may hold secrets."
    )
    max_chunks: int = Field(16, ge=1, le=64, description="Chunks kept (llama.vscode: 16).")
    chunk_lines: int = Field(64, ge=1, le=1024, description="Lines per chunk at most.")
    max_chars: int = Field(
        4000,
        ge=0,
        description="Characters of context per request at most; the prefix and suffix keep "
        "their own limits ([completion]) and never lose room to it.",
    )
    terminals: list[str] = Field(
        default_factory=lambda: [
            "xterm",
            "uxterm",
            "urxvt",
            "gnome-terminal",
            "konsole",
            "alacritty",
            "kitty",
            "foot",
            "wezterm",
            "terminator",
            "tilix",
            "xfce4-terminal",
            "lxterminal",
            "st-256color",
            "qterminal",
            "ptyxis",
        ],
        description="Window classes or processes whose titles are not sent (they show "
        "commands, paths and hosts).",
    )
    password_managers: list[str] = Field(
        default_factory=lambda: [
            "keepassxc",
            "keepass",
            "1password",
            "bitwarden",
            "enpass",
            "lastpass",
            "seahorse",
            "kwalletmanager",
            "gnome-keyring",
            "pinentry",
            "qtpass",
            "proton pass",
        ],
        description="Window classes or processes that never get or give context.",
    )


PAUSE_MIN_MS = 100
PAUSE_MAX_MS = 1000


class SuggestionsConfig(Section):
    """Suggestions as you type: opt-in; the hotkeys stay the default way to ask."""

    auto: bool = Field(
        False,
        description="Ask by itself when you pause typing (off: only the hotkeys ask). It "
        "listens to the focused application's accessibility text events, which switches "
        "some Qt applications into their screen-reader mode.",
    )
    style: Literal["ghost", "popup"] | None = Field(
        None,
        description="How a suggestion shows, for the preview hotkey too: dimmed text at the "
        "caret (ghost) or the boxed popup; unset: ghost for suggestions as you type, the "
        "popup for the hotkey. Ghost text falls back to the popup where no caret is known.",
    )

    def style_for(self, auto: bool) -> Literal["ghost", "popup"]:
        """The style in force for a suggestion as you type (``auto``) or the hotkey."""
        return self.style or ("ghost" if auto else "popup")

    pause_ms: int = Field(
        0,
        ge=0,
        le=PAUSE_MAX_MS,
        description=f"The pause before asking, {PAUSE_MIN_MS}-{PAUSE_MAX_MS} ms; 0: adaptive "
        "(from your typing rhythm and the backend's recent latency).",
    )
    backends: list[str] | None = Field(
        None,
        description="Backends asked automatically (unset: the hotkey's chain, "
        "routing.default); only local ones unless cloud_auto is on.",
    )
    cloud_auto: bool = Field(
        False,
        description="Let suggestions as you type ask backends that are not on this machine "
        "(a paid cloud API); off: only local backends are asked automatically.",
    )
    max_chars_after_caret: int = Field(
        8,
        ge=0,
        le=200,
        description="Do not ask when more than this many characters follow the caret on "
        "its line (you are editing, not writing on).",
    )
    ghost_lines: int = Field(
        3, ge=1, le=20, description="How many lines of a multi-line suggestion the ghost shows."
    )

    @field_validator("pause_ms")
    @classmethod
    def _pause(cls, value: int) -> int:
        if value and value < PAUSE_MIN_MS:
            raise ValueError(f"0 (adaptive) or {PAUSE_MIN_MS}-{PAUSE_MAX_MS} ms")
        return value


def is_local_backend(backend: BackendConfig) -> bool:
    """On this machine: asked automatically even without ``suggestions.cloud_auto``."""
    return backend.type == "llamacpp-managed" or (
        backend.type != "mqtt" and is_loopback(backend.url)
    )


class UiConfig(Section):
    tray: bool = True
    notifications: bool = True
    preview_font_size: int = Field(11, ge=6, le=48)
    history_size: int = Field(50, ge=0, le=1000)
    preview_accept_keys: list[Hotkey] = Field(
        default_factory=lambda: ["<tab>", "<enter>"],
        min_length=1,
        description="Keys that insert the previewed completion (taken only while it shows).",
    )
    preview_dismiss_key: Hotkey = Field(
        "<esc>", description="Closes the preview, stops the request."
    )
    preview_next_key: Hotkey = Field("<alt>+]", description="Next alternative (next backend).")
    preview_previous_key: Hotkey = Field("<alt>+[", description="Previous alternative.")

    @field_validator("preview_dismiss_key", "preview_next_key", "preview_previous_key")
    @classmethod
    def _valid_key(cls, value: str) -> str:
        return _check_hotkey(value)

    @field_validator("preview_accept_keys")
    @classmethod
    def _valid_keys(cls, value: list[str]) -> list[str]:
        return [_check_hotkey(key) for key in value]


def _node_name() -> str:
    cleaned = re.sub(r"[/+#\s]", "-", socket.gethostname()) or "anyfill"
    return cleaned[:64]


class MqttConfig(Section):
    """The daemon on a broker (status, events, request API) and ``anyfill worker``."""

    enabled: bool = False
    url: str = Field(
        "mqtt://127.0.0.1:1883", description="mqtt://[user@]host[:port] or mqtts:// for TLS."
    )
    node: str = Field(default_factory=_node_name)
    prefix: str = Field("anyfill", description="First level of every topic.")
    protocol: Literal["5", "3.1.1"] = Field(
        "5", description="MQTT version; worker pools and Response Topics need 5."
    )
    username: str = ""
    password_key: str = Field(
        "",
        description="Keyring entry holding the broker password (service 'anyfill'); "
        "ANYFILL_MQTT_PASSWORD is read when the keyring has none.",
    )
    client_id: str = Field("", description="Empty: anyfill-<node>.")
    tls_ca: str = Field("", description="CA file for mqtts:// (empty: the system's CAs).")
    tls_cert: str = Field("", description="Client certificate file (TLS client auth).")
    tls_key: str = Field("", description="Client key file (TLS client auth).")
    keepalive_s: int = Field(30, ge=5, le=3600)
    worker_pool: str = Field("", description="The pool 'anyfill worker' serves without --pool.")
    allow_remote_insert: bool = Field(
        False,
        description="Let broker requests signed with the insert key type into this desktop.",
    )
    insert_key: str = Field(
        "mqtt-insert",
        description="Keyring entry holding the shared secret that insert requests are signed "
        "with; ANYFILL_MQTT_INSERT_KEY is read when the keyring has none.",
    )

    @field_validator("url")
    @classmethod
    def _scheme(cls, value: str) -> str:
        return _check_broker_url(value)

    @field_validator("node", "prefix")
    @classmethod
    def _node(cls, value: str) -> str:
        if not value or any(ch in value for ch in "/+#$"):
            raise ValueError("a topic level is non-empty and has no '/', '+', '#' or '$'")
        return value

    @field_validator("worker_pool")
    @classmethod
    def _pool(cls, value: str) -> str:
        if value and not _POOL.match(value):
            raise ValueError("a pool name is letters, digits, '-', '_' or '.'")
        return value


class LoggingConfig(Section):
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    file: bool = True
    max_bytes: int = Field(1_000_000, ge=10_000)
    backups: int = Field(3, ge=0, le=50)

    @field_validator("level", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value


class ModelsConfig(Section):
    """Where downloaded models live and where they come from."""

    dir: str = Field(
        "", description="Folder for downloaded models (empty: the user cache dir, 'models')."
    )
    endpoint: str = Field(
        "",
        description="Hugging Face Hub or mirror URL (empty: $HF_ENDPOINT, else huggingface.co).",
    )

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str) -> str:
        if value:
            _HTTP_URL.validate_python(value)
        return value.rstrip("/")


class PrivacyConfig(Section):
    log_text: bool = Field(False, description="Write captured text and completions to the log.")
    mqtt_text: bool = Field(
        False,
        description="Publish captured text (and a server's error words, which may repeat it) "
        "over MQTT.",
    )


def _default_backends() -> list[BackendConfig]:
    return [
        BackendConfig(name="llamacpp", type="llamacpp", url="http://127.0.0.1:8080"),
        BackendConfig(
            name="ollama",
            type="ollama",
            url="http://127.0.0.1:11434",
            model="qwen2.5-coder:1.5b-base",
        ),
        # Last: runs llama-server with a downloaded model when the user runs no server.
        BackendConfig(
            name="managed",
            type="llamacpp-managed",
            url=MANAGED_DEFAULT_URL,
            model=DEFAULT_MANAGED_MODEL,
        ),
    ]


class Settings(Section):
    """The whole configuration file."""

    schema_version: int = Field(SCHEMA_VERSION, ge=1)
    backends: list[BackendConfig] = Field(default_factory=_default_backends)
    routing: RoutingConfig = Field(default_factory=RoutingConfig)
    hotkeys: HotkeysConfig = Field(default_factory=HotkeysConfig)
    capture: CaptureConfig = Field(default_factory=CaptureConfig)
    insert: InsertConfig = Field(default_factory=InsertConfig)
    completion: CompletionConfig = Field(default_factory=CompletionConfig)
    ui: UiConfig = Field(default_factory=UiConfig)
    suggestions: SuggestionsConfig = Field(default_factory=SuggestionsConfig)
    mqtt: MqttConfig = Field(default_factory=MqttConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    models: ModelsConfig = Field(default_factory=ModelsConfig)
    privacy: PrivacyConfig = Field(default_factory=PrivacyConfig)
    context: ContextConfig = Field(default_factory=ContextConfig)

    @field_validator("schema_version")
    @classmethod
    def _known_version(cls, value: int) -> int:
        if value > SCHEMA_VERSION:
            raise ValueError(
                f"this file is for a newer anyfill (schema {value}); this one reads up to "
                f"{SCHEMA_VERSION}: upgrade anyfill"
            )
        return value

    @model_validator(mode="after")
    def _routing_names_exist(self) -> Settings:
        names = [backend.name for backend in self.backends]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"backend names must be unique; repeated: {', '.join(duplicates)}")
        if "default" not in self.routing.model_fields_set:
            # The default chain names the default backends; a file that lists its own
            # backends (e.g. without 'managed') gets the chain of those it has.
            kept = [name for name in self.routing.default if name in names]
            if kept != self.routing.default:
                self.routing.default = kept
                self.routing.model_fields_set.discard("default")
        unknown = [name for name in self.routing.default if name not in names]
        if unknown:
            raise ValueError(
                f"routing.default names unknown backend(s) {', '.join(unknown)}; "
                f"defined: {', '.join(names) or 'none'}"
            )
        unknown = [name for name in self.suggestions.backends or () if name not in names]
        if unknown:
            raise ValueError(
                f"suggestions.backends names unknown backend(s) {', '.join(unknown)}; "
                f"defined: {', '.join(names) or 'none'}"
            )
        for rule in self.insert.apps:
            unknown = [name for name in rule.backends or () if name not in names]
            if unknown:
                raise ValueError(
                    f"the app rule {rule.match or rule.title!r} names unknown backend(s) "
                    f"{', '.join(unknown)}; defined: {', '.join(names) or 'none'}"
                )
        return self

    def suggestion_chain(self, app_chain: tuple[str, ...] = ()) -> tuple[str, ...]:
        """The backends suggestions as you type may ask: ``suggestions.backends``, else the
        app's or the default chain; without ``cloud_auto`` only the local ones."""
        chain = self.suggestions.backends or list(app_chain) or self.routing.default
        if self.suggestions.cloud_auto:
            return tuple(chain)
        return tuple(name for name in chain if is_local_backend(self.backend(name)))

    def backend(self, name: str) -> BackendConfig:
        for backend in self.backends:
            if backend.name == name:
                return backend
        raise KeyError(name)
