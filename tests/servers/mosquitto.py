"""A real mosquitto broker on a free loopback port, with a config written for the test.

``Broker.start(users=..., acl=...)`` writes ``mosquitto.conf`` (and a password file made
with ``mosquitto_passwd`` and an ACL file when asked), starts ``mosquitto -c`` and waits
until the port accepts connections. ``restart()`` keeps the port; ``stop()`` ends it.
Also ``Probe``: a plain paho-mqtt client (MQTT 5 or 3.1.1) that collects what it receives.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import queue
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

MOSQUITTO = shutil.which("mosquitto") or (
    "/usr/sbin/mosquitto" if Path("/usr/sbin/mosquitto").exists() else None
)
SKIP_REASON = "needs the mosquitto broker (Debian package mosquitto, .ci/apt-packages.txt)"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Broker:
    port: int
    workdir: Path
    config: Path
    process: subprocess.Popen[bytes] | None = None
    ca: Path | None = None
    """The self-signed certificate of a TLS listener (its own CA)."""

    @property
    def url(self) -> str:
        return f"{'mqtts' if self.ca else 'mqtt'}://127.0.0.1:{self.port}"

    @classmethod
    @contextlib.contextmanager
    def start(
        cls,
        users: Mapping[str, str] | None = None,
        acl: str | None = None,
        tls: bool = False,
        *,
        anonymous: bool = False,
    ) -> Iterator[Broker]:
        """``anonymous`` with ``users``: password accounts, and anyone else let in too."""
        assert MOSQUITTO is not None, SKIP_REASON
        workdir = Path(tempfile.mkdtemp(prefix="anyfill-mqtt-"))
        port = free_port()
        lines = [f"listener {port} 127.0.0.1", "persistence false", "log_type error"]
        lines.append("set_tcp_nodelay true")  # as docs/mqtt.md advises for a team broker
        # Started as root, mosquitto would switch to the user "mosquitto", who cannot read
        # this private directory; as anyone else the option is ignored.
        lines.append(f"user {getpass.getuser()}")
        lines.append(f"log_dest file {workdir / 'mosquitto.log'}")
        if users:
            passwords = workdir / "passwd"
            passwords.write_text("")
            for user, password in users.items():
                subprocess.run(
                    ["mosquitto_passwd", "-b", str(passwords), user, password],
                    check=True,
                    capture_output=True,
                )
            passwords.chmod(0o600)
            lines += [f"allow_anonymous {str(anonymous).lower()}", f"password_file {passwords}"]
        else:
            lines.append("allow_anonymous true")
        if acl is not None:
            acl_file = workdir / "acl"
            acl_file.write_text(acl)
            acl_file.chmod(0o600)
            lines.append(f"acl_file {acl_file}")
        ca: Path | None = None
        if tls:
            ca, key = workdir / "broker.crt", workdir / "broker.key"
            command = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
            command += ["-keyout", str(key), "-out", str(ca), "-subj", "/CN=127.0.0.1"]
            command += ["-addext", "subjectAltName=IP:127.0.0.1"]
            subprocess.run(
                command,
                check=True,
                capture_output=True,
            )
            lines += [f"certfile {ca}", f"keyfile {key}"]
        config = workdir / "mosquitto.conf"
        config.write_text("\n".join(lines) + "\n")
        broker = cls(port, workdir, config, ca=ca)
        broker.run()
        try:
            yield broker
        finally:
            broker.stop()
            shutil.rmtree(workdir, ignore_errors=True)

    def run(self) -> None:
        assert MOSQUITTO is not None
        with (self.workdir / "mosquitto.out").open("ab") as out:
            self.process = subprocess.Popen(
                [MOSQUITTO, "-c", str(self.config)], stdout=out, stderr=out
            )
        deadline = time.monotonic() + 10
        while True:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), 0.2),
            ):
                return
            if self.process.poll() is not None or time.monotonic() > deadline:
                log = (self.workdir / "mosquitto.out").read_text(errors="replace")
                raise RuntimeError(f"mosquitto did not start: {log}")
            time.sleep(0.02)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.process = None

    def restart(self, pause_s: float = 0.0) -> None:
        self.stop()
        time.sleep(pause_s)
        self.run()


@dataclass
class Received:
    topic: str
    payload: bytes
    retain: bool
    correlation: bytes | None
    expiry: int | None
    response_topic: str | None = None

    def json(self) -> Any:
        return json.loads(self.payload)


@dataclass
class Probe:
    """A plain paho client in its own network thread; received messages go to a queue."""

    port: int
    v5: bool = True
    username: str | None = None
    password: str | None = None
    client: paho.Client = field(init=False)
    inbox: queue.Queue[Received] = field(default_factory=queue.Queue)
    connect_code: int | None = None
    puback_codes: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        protocol = paho.MQTTv5 if self.v5 else paho.MQTTv311
        self.client = paho.Client(
            paho.CallbackAPIVersion.VERSION2,
            client_id=f"probe-{uuid.uuid4().hex[:8]}",
            protocol=protocol,
        )
        if self.username:
            self.client.username_pw_set(self.username, self.password)
        self.client.on_message = self._on_message
        self.client.on_connect = self._on_connect
        self.client.on_publish = self._on_publish

    def _on_connect(self, client: Any, userdata: Any, flags: Any, code: Any, props: Any) -> None:
        self.connect_code = int(code.value)

    def _on_publish(self, client: Any, userdata: Any, mid: int, code: Any, props: Any) -> None:
        self.puback_codes[mid] = int(code.value)

    def _on_message(self, client: Any, userdata: Any, message: paho.MQTTMessage) -> None:
        props = message.properties
        correlation = getattr(props, "CorrelationData", None) if props else None
        expiry = getattr(props, "MessageExpiryInterval", None) if props else None
        reply_to = getattr(props, "ResponseTopic", None) if props else None
        self.inbox.put(
            Received(message.topic, message.payload, message.retain, correlation, expiry, reply_to)
        )

    def __enter__(self) -> Probe:
        self.client.connect("127.0.0.1", self.port, keepalive=30)
        self.client.loop_start()
        deadline = time.monotonic() + 5
        while self.connect_code is None and time.monotonic() < deadline:
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.disconnect()
        self.client.loop_stop()
        # loop_start made a socket pair to wake its thread; paho closes it only when the
        # client is garbage-collected, which may be in the middle of a later test.
        self.client._reset_sockets(sockpair_only=True)

    def subscribe(self, topic: str) -> None:
        result, _mid = self.client.subscribe(topic, qos=1)
        assert result == paho.MQTT_ERR_SUCCESS
        time.sleep(0.1)  # SUBACK before what follows is published

    def publish(
        self,
        topic: str,
        payload: bytes | str,
        *,
        response_topic: str | None = None,
        correlation: bytes | None = None,
        expiry: int | None = None,
        retain: bool = False,
    ) -> int:
        props = None
        if self.v5 and (response_topic or correlation is not None or expiry is not None):
            props = Properties(PacketTypes.PUBLISH)
            if response_topic:
                props.ResponseTopic = response_topic
            if correlation is not None:
                props.CorrelationData = correlation
            if expiry is not None:
                props.MessageExpiryInterval = expiry
        info = self.client.publish(topic, payload, qos=1, retain=retain, properties=props)
        info.wait_for_publish(5)
        return int(info.mid)

    def next(self, within: float = 5.0) -> Received:
        return self.inbox.get(timeout=within)

    def until(self, predicate: Any, within: float = 5.0) -> list[Received]:
        """Messages up to and including the first that satisfies ``predicate``."""
        seen: list[Received] = []
        deadline = time.monotonic() + within
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no matching message; got {[m.payload for m in seen]}")
            try:
                message = self.inbox.get(timeout=left)
            except queue.Empty:
                continue
            seen.append(message)
            if predicate(message):
                return seen
