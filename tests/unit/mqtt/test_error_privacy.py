"""An error whose message holds a server's words: each channel shows them by its own switch.

``str()`` (terminal, log, tray) follows ``privacy.log_text``; what goes to the broker follows
``privacy.mqtt_text``; an error built on another (a cooldown, a worker's reply) keeps the
rule."""

from __future__ import annotations

import gc
import json
import weakref
from collections.abc import Iterator

import pytest

from anyfill.daemon.backends.wire import error_for_status
from anyfill.daemon.errors import BackendError, told
from anyfill.daemon.log import set_text_shown, text_shown
from anyfill.daemon.mqtt.protocol import error_from_json, error_json, published
from anyfill.daemon.scheduler.cooldown import Health

SECRET = "my_private_identifier_77"


@pytest.fixture
def log_text() -> Iterator[None]:
    before = text_shown()
    yield
    set_text_shown(before)


def echoed() -> BackendError:
    body = json.dumps({"error": {"message": f"cannot parse {SECRET}", "type": "server_error"}})
    return error_for_status("stub", 500, {}, body.encode(), url="http://127.0.0.1:1/infill")


@pytest.mark.usefixtures("log_text")
@pytest.mark.parametrize("shown", [False, True])
def test_the_log_follows_log_text_and_the_broker_mqtt_text(shown: bool) -> None:
    set_text_shown(shown)
    error = echoed()
    assert (SECRET in str(error)) is shown
    assert SECRET not in published(error, with_text=False)
    assert "set privacy.mqtt_text = true to see it" in published(error, with_text=False)
    assert f"(server said: cannot parse {SECRET})" in published(error, with_text=True)
    assert "error code: 'server_error'" in published(error, with_text=False)


@pytest.mark.usefixtures("log_text")
def test_a_cooldown_message_built_on_the_failure_keeps_its_placeholder() -> None:
    set_text_shown(False)
    health = Health()
    health.fail(0.0, echoed(), None)
    assert SECRET not in health.reason
    assert SECRET in health.reason_told(with_text=True)
    assert SECRET not in health.reason_told(with_text=False)
    set_text_shown(True)
    assert SECRET in health.reason  # rendered when read, so a reload of log_text counts


@pytest.mark.usefixtures("log_text")
@pytest.mark.parametrize("worker_mqtt_text", [False, True])
def test_a_workers_error_is_shown_on_the_desktop_by_the_desktops_switches(
    worker_mqtt_text: bool,
) -> None:
    sent = error_json(echoed(), with_text=worker_mqtt_text, for_worker_link=True)
    assert SECRET not in sent["message"]
    assert ("message_with_text" in sent) is worker_mqtt_text
    back = error_from_json("team", json.loads(json.dumps(sent)))
    set_text_shown(False)
    assert SECRET not in str(back)
    assert SECRET not in told(back, with_text=False)
    set_text_shown(True)  # the desktop's log_text: the words only if the worker sent them
    assert (SECRET in str(back)) is worker_mqtt_text
    assert (SECRET in told(back, with_text=True)) is worker_mqtt_text


def test_a_foreign_exception_is_only_named_without_the_switch() -> None:
    bug = ValueError(f"bad value {SECRET}")
    assert published(bug, with_text=False) == "ValueError"
    assert SECRET in published(bug, with_text=True)


def test_a_cooldown_keeps_the_failures_words_not_the_failure() -> None:
    """A cooldown lasts up to minutes: the failure's traceback (the frames of the request,
    the document among them) must not live that long."""
    error = echoed()
    gone = weakref.ref(error)
    health = Health()
    health.fail(0.0, error, None)
    del error
    gc.collect()
    assert gone() is None
    assert SECRET in health.reason_told(with_text=True)
