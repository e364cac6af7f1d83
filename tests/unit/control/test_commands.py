"""The command registry: names, replacing, and what a handler may return."""

from __future__ import annotations

from typing import Any

import pytest

from anyfill.daemon.control.commands import CommandError, Commands


@pytest.mark.parametrize("name", ["", "Show", "show settings", "-x", "x" * 41, "ä"])
def test_invalid_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="invalid command name"):
        Commands().register(name, lambda args: None)


def test_a_name_is_registered_once_unless_replaced() -> None:
    commands = Commands()
    commands.register("show-settings", lambda args: {"v": 1})
    with pytest.raises(ValueError, match="already registered"):
        commands.register("show-settings", lambda args: {"v": 2})
    commands.register("show-settings", lambda args: {"v": 3}, replace=True, summary="s")
    assert commands.summaries() == {"show-settings": "s"}
    commands.unregister("show-settings")
    assert commands.summaries() == {}


async def test_dispatch_accepts_sync_async_and_none() -> None:
    commands = Commands()

    async def later(args: dict[str, Any]) -> dict[str, Any]:
        return {"got": args}

    commands.register("now", lambda args: {"got": args})
    commands.register("later", later)
    commands.register("none", lambda args: None)
    assert await commands.dispatch("now", {"a": 1}) == {"got": {"a": 1}}
    assert await commands.dispatch("later", {}) == {"got": {}}
    assert await commands.dispatch("none", {}) == {}


async def test_unknown_command_lists_the_known_ones() -> None:
    commands = Commands()
    commands.register("ping", lambda args: None)
    with pytest.raises(CommandError, match=r"unknown command 'pong' \(known: ping\)") as info:
        await commands.dispatch("pong", {})
    assert info.value.code == "unknown-command"


async def test_a_handler_returning_something_else_is_a_type_error() -> None:
    commands = Commands()
    commands.register("odd", lambda args: [1, 2])  # type: ignore[arg-type,return-value]
    with pytest.raises(TypeError, match="returned list"):
        await commands.dispatch("odd", {})
