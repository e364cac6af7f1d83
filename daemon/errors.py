"""The one exception tree of anyfill.

Everything the core raises on purpose derives from :class:`AnyfillError`; foreign
exceptions (httpx, OS, keyring, pydantic) are mapped to these at the boundary with
``raise ... from exc`` so the UI, the CLI and MQTT only ever see our types.

::

    AnyfillError                      message is one sentence a user can act on
    ├── ConfigError                   file, line and key where known
    │   └── NeedsKeyError             an API key is missing; says how to set it
    ├── BackendError                  names the backend
    │   ├── BackendUnavailable        nothing listens / DNS / connection reset   (retryable)
    │   ├── BackendTimeout            connect, first-token or total timeout      (retryable)
    │   ├── RateLimited               429 / quota; carries retry_after seconds    (retryable)
    │   ├── ServerError               5xx                                         (retryable)
    │   ├── ProtocolError             the stream broke the wire format           (retryable)
    │   ├── AuthError                 401 / 403: the key was refused
    │   ├── ModelNotFound             404 for the model
    │   ├── BadRequest                400 / 422: the request itself is wrong
    │   └── UnsupportedFeature        501, or a field the server rejects (e.g. suffix)
    ├── RequestDropped                a request never ran: superseded, cancelled, past deadline
    ├── DesktopUnavailable            no display / no permission for hotkeys and keys
    ├── CaptureError                  the text around the caret could not be read
    │   └── SecureField               the caret is in a password field: never read it
    ├── InsertError                   the completion could not be inserted
    │   ├── FocusChanged              the focused window is not the captured one
    │   └── SelectionAppeared         text got selected in the target after capture
    ├── BusError                      MQTT broker problems
    ├── ControlError                  the control socket: unsafe directory, bad answer
    │   ├── NotRunning                no daemon answers on the control socket
    │   ├── CommandRefused            the daemon answered a command with an error code
    │   └── AlreadyRunning            another `anyfill run` of this user holds the lock
    └── AutostartError                a start-up entry could not be written, or is the user's

``retryable`` tells the scheduler whether to cool the backend down and fall back
(True) or to stop and tell the user to fix something (False).
"""

from __future__ import annotations

TYPE_CHECKING = False  # not ``typing``'s: this module loads in `anyfill trigger`'s light path
if TYPE_CHECKING:
    from typing import Self

__all__ = [
    "AlreadyRunning",
    "AnyfillError",
    "AuthError",
    "AutostartError",
    "BackendError",
    "BackendTimeout",
    "BackendUnavailable",
    "BadRequest",
    "BusError",
    "CaptureError",
    "CommandRefused",
    "ConfigError",
    "ControlError",
    "DesktopUnavailable",
    "FocusChanged",
    "InsertError",
    "ModelNotFound",
    "NeedsKeyError",
    "NotRunning",
    "ProtocolError",
    "RateLimited",
    "RequestDropped",
    "SecureField",
    "SelectionAppeared",
    "ServerError",
    "Told",
    "UnsupportedFeature",
    "error_text",
    "told",
]


class AnyfillError(Exception):
    """Base of every error anyfill raises on purpose.

    A message may hold captured text (a server's error body can repeat the prompt). It is
    written with a placeholder instead (``hiding``), so that each place the message goes
    decides: ``str()`` follows ``privacy.log_text`` (terminal, log, tray) and MQTT follows
    ``privacy.mqtt_text`` (``message(with_text=...)``), each as set when it is shown.
    """

    #: True when trying again later (or elsewhere) may succeed.
    retryable: bool = False

    _captured: tuple[tuple[str, str], ...] = ()

    def hiding(self, placeholder: str, text: str) -> Self:
        """``placeholder``, written in the message, stands for ``text`` (captured text)."""
        if placeholder and placeholder != text:
            self._captured = (*self._captured, (placeholder, text))
        return self

    def message(self, *, with_text: bool) -> str:
        """The message with its captured text, or with only the placeholders."""
        text = super().__str__()
        if with_text:
            for placeholder, captured in self._captured:
                text = text.replace(placeholder, captured)
        return text

    def __str__(self) -> str:
        from anyfill.daemon.log import text_shown  # logging: not loaded until said

        return self.message(with_text=text_shown())


class ConfigError(AnyfillError):
    """The configuration is missing, unreadable or invalid."""

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        line: int | None = None,
        key: str | None = None,
    ) -> None:
        self.path = path
        self.line = line
        self.key = key
        self.reason = message
        """What is wrong, without the path in front."""
        where = ""
        if path:
            where = f"{path}:{line}: " if line else f"{path}: "
        super().__init__(f"{where}{message}")


class NeedsKeyError(ConfigError):
    """A backend needs an API key and none was found."""


class BackendError(AnyfillError):
    """A backend failed; ``backend`` names it as the config does."""

    server_message = ""
    """The server's own words for the failure, for code that must tell failures apart.
    Captured text (it may repeat the prompt): never put it in a message, log or event."""

    def __init__(self, backend: str, message: str, *, status: int | None = None) -> None:
        self.backend = backend
        self.status = status
        super().__init__(message)


class BackendUnavailable(BackendError):
    retryable = True


class BackendTimeout(BackendError):
    retryable = True


class ServerError(BackendError):
    retryable = True


class ProtocolError(BackendError):
    retryable = True


class RateLimited(BackendError):
    """The backend asked us to slow down; ``retry_after`` is in seconds when known."""

    retryable = True

    def __init__(
        self,
        backend: str,
        message: str,
        *,
        retry_after: float | None = None,
        status: int | None = 429,
    ) -> None:
        self.retry_after = retry_after
        super().__init__(backend, message, status=status)


class AuthError(BackendError):
    pass


class ModelNotFound(BackendError):
    pass


class BadRequest(BackendError):
    pass


class UnsupportedFeature(BackendError):
    pass


class RequestDropped(AnyfillError):
    """A request was dropped before it finished: ``reason`` says why."""

    def __init__(self, request_id: str, reason: str) -> None:
        self.request_id = request_id
        self.reason = reason
        super().__init__(f"request {request_id} dropped: {reason}")


class DesktopUnavailable(AnyfillError):
    """The desktop cannot be driven: no display, or the OS refused the permissions."""


class HotkeyTaken(DesktopUnavailable):
    """Another program holds a combination anyfill was asked to grab. ``kept``: the
    combination the action keeps instead (a reload that could not take the new one), empty
    when the action is off; raised (not returned) when the complete hotkey is taken at
    start, since the daemon cannot work without it."""

    def __init__(self, hotkey: str, action: str, kept: str = "") -> None:
        self.hotkey = hotkey
        self.action = action
        self.kept = kept
        then = f"keeping {kept}" if kept else "it is disabled"
        super().__init__(f"hotkey {hotkey} ({action}) is taken by another program; {then}")


class RestartNeeded(AnyfillError):
    """A setting that cannot change while anyfill runs here; ``key`` names it."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        super().__init__(message)


class CaptureError(AnyfillError):
    pass


class SecureField(CaptureError):
    """The focused field holds a password; anyfill neither reads nor types there."""


class InsertError(AnyfillError):
    pass


class FocusChanged(InsertError):
    pass


class ClipboardUnreadable(CaptureError, InsertError):
    """The clipboard's owner offered formats but none could be saved: taking the
    clipboard now would lose the user's, so the capture or paste stops before it."""


class SelectionAppeared(InsertError):
    """Text became selected in the target after capture; a paste would replace it."""


class BusError(AnyfillError):
    retryable = True


class ControlError(AnyfillError):
    """The control socket cannot be used safely, or the daemon answered with an error."""


class NotRunning(ControlError):
    """No anyfill daemon of this user answers on the control socket."""


class AlreadyRunning(ControlError):
    """Another ``anyfill run`` of this user is alive; ``pid`` when it could be read."""

    def __init__(self, message: str, pid: int | None = None) -> None:
        self.pid = pid
        super().__init__(message)


class CommandRefused(ControlError):
    """The daemon answered with an error; ``code`` is the protocol's error code."""

    def __init__(self, message: str, code: str) -> None:
        self.code = code
        super().__init__(message)


class AutostartError(AnyfillError):
    """``anyfill autostart`` could not do what was asked; nothing was changed."""


def error_text(exc: BaseException) -> str:
    """What to tell the user about ``exc``: its message, and when every backend of a chain
    failed, each one's failure, the first choice first (the cause to fix is usually there,
    not in the last fallback's "nothing listens")."""
    for note in getattr(exc, "__notes__", ()):
        if isinstance(note, str) and note.startswith(EVERY_BACKEND_FAILED):
            return note
    return str(exc)


class Told:
    """An error's message in both forms, kept without the error itself (its traceback
    holds the frames of the failed request, the document among them): for a cooldown's
    reason and the events that tell it."""

    __slots__ = ("full", "plain")

    def __init__(self, plain: str, full: str) -> None:
        self.plain = plain
        """Without captured text."""
        self.full = full
        """With it (the same when it holds none)."""

    @classmethod
    def of(cls, error: BaseException, *, named: bool = False) -> Told:
        """``error``'s message; ``named``: as ``Class: message`` (``Class`` when a foreign
        exception's message may not be said)."""
        plain, full = told(error, with_text=False), told(error, with_text=True)
        if named:
            name = type(error).__name__
            plain = f"{name}: {plain}" if plain else name
            full = f"{name}: {full}" if full else name
        return cls(plain, full)

    def text(self, *, with_text: bool) -> str:
        return self.full if with_text else self.plain

    def __str__(self) -> str:
        from anyfill.daemon.log import text_shown

        return self.text(with_text=text_shown())

    def __repr__(self) -> str:
        return f"Told({self.plain!r})"


def told(error: BaseException, *, with_text: bool) -> str:
    """``error``'s message as a channel with its own privacy switch may show it: captured
    text only ``with_text``. A foreign exception (a bug) says nothing without it: its
    message may hold anything (its class name is safe to show)."""
    if isinstance(error, AnyfillError):
        return error.message(with_text=with_text)
    return str(error) if with_text else ""


EVERY_BACKEND_FAILED = "every backend failed: "
