"""Where the control socket and the instance lock live, and the checks that keep them private.

``$XDG_RUNTIME_DIR/anyfill/`` holds ``control.sock`` (mode 0600) and ``instance.lock``. When
``XDG_RUNTIME_DIR`` is unset or unsafe (not a directory of ours with mode 0700), platformdirs
picks the fallback (``/run/user/<uid>``, else ``runtime-<uid>`` in the temporary directory)
with the same ownership checks. The daemon and the client both call :func:`control_dir`, so
they always agree.

Standard library only on the common path: the client imports this on every shortcut press.
"""

from __future__ import annotations

import os
import stat

from anyfill.daemon.errors import ControlError

APP_DIR = "anyfill"
SOCKET_NAME = "control.sock"
LOCK_NAME = "instance.lock"
# sockaddr_un.sun_path is 108 bytes on Linux (104 on macOS), the terminating NUL included.
MAX_SOCKET_PATH = 107


def _is_private_dir(path: str) -> bool:
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return (
        stat.S_ISDIR(info.st_mode)
        and info.st_uid == os.geteuid()
        and stat.S_IMODE(info.st_mode) & 0o077 == 0
    )


def runtime_base() -> str:
    """The user's runtime directory (without ``anyfill/``)."""
    xdg = os.environ.get("XDG_RUNTIME_DIR", "")
    if xdg and os.path.isabs(xdg) and _is_private_dir(xdg):
        return xdg
    return _fallback_base()


def _fallback_base() -> str:
    import warnings

    import platformdirs

    with warnings.catch_warnings():
        # platformdirs warns about an unset XDG_RUNTIME_DIR; it is normal outside a login
        # session (containers, cron) and the fallback it picks is checked like the rest.
        warnings.simplefilter("ignore")
        try:
            return platformdirs.user_runtime_dir()
        except PermissionError as exc:
            raise ControlError(
                f"no safe runtime directory for the control socket: {exc}; "
                "set XDG_RUNTIME_DIR to a directory only you can use (mode 0700)"
            ) from exc


def control_dir() -> str:
    """``<runtime dir>/anyfill``; not created here (see :func:`ensure_private_dir`)."""
    return os.path.join(runtime_base(), APP_DIR)


def socket_path() -> str:
    return os.path.join(control_dir(), SOCKET_NAME)


def lock_path() -> str:
    return os.path.join(control_dir(), LOCK_NAME)


def ensure_private_dir(path: str) -> str:
    """Create ``path`` (and a missing parent) with mode 0700, or check an existing one.

    Refuses a symlink, a non-directory and a directory owned by another user: whoever owns
    the directory could replace the socket and read or answer our commands. A directory of
    ours that others can enter is tightened to 0700.
    """
    parent = os.path.dirname(path)
    if parent and not os.path.lexists(parent):
        _make_private(parent)
    _make_private(path)
    return path


def _make_private(path: str) -> None:
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise ControlError(f"cannot create {path}: {exc.strerror or exc}") from exc
    check_private_dir(path, fix=True)


def check_private_dir(path: str, *, fix: bool = False) -> None:
    """Raise :class:`ControlError` unless ``path`` is a real directory owned by this user
    that nobody else can enter (``fix``: tighten our own directory's mode instead)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise ControlError(f"cannot inspect {path}: {exc.strerror or exc}") from exc
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise ControlError(f"{path} is not a directory; remove it so anyfill can create its own")
    if info.st_uid != os.geteuid():
        raise ControlError(
            f"{path} belongs to another user (uid {info.st_uid}); anyfill will not put its "
            "control socket there: remove it, or set XDG_RUNTIME_DIR to your own directory"
        )
    if stat.S_IMODE(info.st_mode) & 0o077:
        if not fix:
            raise ControlError(f"{path} can be entered by other users; run: chmod 700 {path}")
        os.chmod(path, 0o700)


def check_socket_path_length(path: str) -> None:
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        raise ControlError(
            f"the control socket path is too long for a Unix socket ({path}); "
            "set XDG_RUNTIME_DIR to a shorter directory"
        )
