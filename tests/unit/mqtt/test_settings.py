"""The [mqtt] section, the `mqtt` backend type and the broker connection built from them."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from anyfill.config.model import BackendConfig, MqttConfig
from anyfill.daemon.mqtt.connection import backoff_delays, spec_from_config


def test_an_mqtt_backend_needs_a_broker_url_and_a_pool() -> None:
    ok = BackendConfig(name="team", type="mqtt", url="mqtts://alice@broker.lan:8883", pool="gpu")
    assert ok.pool == "gpu"
    assert not ok.needs_key
    with pytest.raises(ValidationError, match="pool"):
        BackendConfig(name="team", type="mqtt", url="mqtt://broker")
    with pytest.raises(ValidationError, match="mqtt://"):
        BackendConfig(name="team", type="mqtt", url="http://broker", pool="gpu")
    with pytest.raises(ValidationError):
        BackendConfig(name="x", type="llamacpp", url="mqtt://broker")


def test_the_connection_comes_from_the_section_and_the_password_from_the_environment() -> None:
    config = MqttConfig(
        url="mqtts://bob@broker.lan", node="desk", protocol="3.1.1", tls_ca="/ca.pem"
    )
    spec = spec_from_config(config, environ={"ANYFILL_MQTT_PASSWORD": "pw"})
    assert (spec.host, spec.port, spec.tls, spec.username) == ("broker.lan", 8883, True, "bob")
    assert spec.password == "pw"
    assert spec.authenticated
    assert not spec.v5
    assert spec.client_id == "anyfill-desk"
    assert "pw" not in repr(spec)
    anonymous = spec_from_config(MqttConfig(node="desk"), environ={})
    assert (anonymous.port, anonymous.tls, anonymous.authenticated) == (1883, False, False)


@pytest.mark.parametrize("bad", ["tcp://x", "mqtt://", "mqtt://a/b", "mqtt://h:p"])
def test_a_bad_broker_url_is_refused(bad: str) -> None:
    with pytest.raises(ValidationError):
        MqttConfig(url=bad)


@pytest.mark.parametrize("bad", ["a/b", "+", "#", "", "$sys"])
def test_node_and_prefix_are_one_topic_level(bad: str) -> None:
    with pytest.raises(ValidationError):
        MqttConfig(node=bad)
    with pytest.raises(ValidationError):
        MqttConfig(prefix=bad)


def test_reconnect_delays_double_up_to_the_cap_with_jitter() -> None:
    delay = backoff_delays(0.5, 30.0)
    for attempt, ceiling in [(0, 0.5), (1, 1.0), (3, 4.0), (10, 30.0), (50, 30.0)]:
        samples = [delay(attempt) for _ in range(200)]
        assert all(ceiling / 2 <= s <= ceiling for s in samples)
        assert max(samples) - min(samples) > ceiling / 10  # jittered, not fixed
