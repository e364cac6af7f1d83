"""`anyfill worker` refuses what cannot work before it connects anywhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.foundation.test_cli import home, run

__all__ = ["home"]


@pytest.mark.parametrize(
    ("args", "config", "says"),
    [
        ((), "", "name the pool"),
        (("--pool", "a/b"), "", "--pool 'a/b'"),
        (("--pool", "gpu", "--id", "x+y"), "", "--id 'x+y'"),
        (("--pool", "gpu"), '[mqtt]\nprotocol = "3.1.1"\n', "need MQTT 5"),
    ],
)
def test_a_worker_that_cannot_work_says_why(
    home: dict[str, str], tmp_path: Path, args: tuple[str, ...], config: str, says: str
) -> None:
    path = tmp_path / "worker.toml"
    path.write_text(config)
    result = run("--config", str(path), "worker", *args, env=home)
    assert result.returncode == 2
    assert says in result.stderr
