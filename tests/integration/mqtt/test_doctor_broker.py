"""`anyfill doctor` says whether the broker of [mqtt] and the pools of `mqtt` backends answer."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.doctor.test_doctor import doctor, lines_by_topic
from tests.servers.mosquitto import Broker

pytestmark = pytest.mark.broker


def write(tmp_path: Path, broker: Broker, extra: str = "") -> Path:
    path = tmp_path / "config.toml"
    path.write_text(
        "[[backends]]\n"
        f'name = "team"\ntype = "mqtt"\nurl = "{broker.url}"\npool = "gpu"\n'
        '[routing]\ndefault = ["team"]\n'
        f'[mqtt]\nenabled = true\nurl = "{broker.url}"\nnode = "desk"\n{extra}'
    )
    return path


def test_the_broker_line_says_reachable_then_unreachable(tmp_path: Path) -> None:
    with Broker.start() as broker:
        config = write(tmp_path, broker)
        up = lines_by_topic(doctor(config, tmp_path).stdout)
        broker.stop()
        down = lines_by_topic(doctor(config, tmp_path).stdout)
    assert up["broker"][0] == "ok"
    assert "MQTT 5, anonymous) as node desk" in up["broker"][1]
    assert up["backend team"] == ("fail", "no worker is online in pool 'gpu'")
    assert down["broker"][0] == "fail"
    assert "unreachable" in down["broker"][1]


def test_a_wrong_password_is_named(tmp_path: Path) -> None:
    with Broker.start(users={"desk": "right"}) as broker:
        config = write(tmp_path, broker, 'username = "desk"\n')
        wrong = lines_by_topic(doctor(config, tmp_path, ANYFILL_MQTT_PASSWORD="wrong").stdout)
        right = lines_by_topic(doctor(config, tmp_path, ANYFILL_MQTT_PASSWORD="right").stdout)
    assert wrong["broker"][0] == "fail"
    assert "unreachable" in wrong["broker"][1]
    assert right["broker"][0] == "ok"
    assert "authenticated" in right["broker"][1]


def test_remote_insert_says_whether_an_insert_key_is_there(tmp_path: Path) -> None:
    with Broker.start() as broker:
        config = write(tmp_path, broker, "allow_remote_insert = true\n")
        without = lines_by_topic(doctor(config, tmp_path).stdout)
        with_key = lines_by_topic(
            doctor(config, tmp_path, ANYFILL_MQTT_INSERT_KEY="shared secret").stdout
        )
        off = lines_by_topic(doctor(write(tmp_path, broker), tmp_path).stdout)
    assert without["remote insert"][0] == "warn"
    assert "every insert request is refused" in without["remote insert"][1]
    assert "set-key mqtt-insert" in without["remote insert"][1]
    assert with_key["remote insert"] == (
        "ok",
        "on, for requests signed with the insert key (docs/mqtt.md)",
    )
    assert "remote insert" not in off
