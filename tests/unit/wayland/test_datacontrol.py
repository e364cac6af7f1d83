"""The pure parts of the native data-control clipboard: which protocol, which formats are
kept, the size limits, and the pipes a format travels through (real pipes, real threads
on the other end)."""

from __future__ import annotations

import os
import threading
import time

from anyfill.daemon.wayland.datacontrol import (
    Budget,
    _read,
    _write,
    choose_family,
    text_type,
    wanted_types,
)
from anyfill.daemon.wayland.protocols.wlr_data_control_unstable_v1 import (
    ZwlrDataControlDeviceV1,
    ZwlrDataControlManagerV1,
    ZwlrDataControlOfferV1,
    ZwlrDataControlSourceV1,
)


def test_ext_data_control_is_preferred_where_both_exist() -> None:
    picked = choose_family({"ext_data_control_manager_v1": 1, "zwlr_data_control_manager_v1": 2})
    assert picked is not None
    assert (picked[0].label, picked[1]) == ("ext-data-control-v1", 1)


def test_wlr_data_control_is_bound_at_the_version_we_speak() -> None:
    for offered, bound in ((1, 1), (2, 2), (3, 2)):
        picked = choose_family({"zwlr_data_control_manager_v1": offered, "wl_seat": 7})
        assert picked is not None
        assert (picked[0].label, picked[1]) == ("wlr-data-control-unstable-v1", bound)


def test_no_data_control_means_no_native_route() -> None:
    assert choose_family({"wl_seat": 7, "wl_data_device_manager": 3}) is None


def test_every_offered_format_is_kept_once_in_order_without_meta_names() -> None:
    offered = ["text/html", "TARGETS", "text/plain", "image/png", "text/html", "", "SAVE_TARGETS"]
    assert wanted_types(offered) == ["text/html", "text/plain", "image/png"]


def test_text_is_read_as_utf8_first() -> None:
    assert text_type(["STRING", "text/plain", "text/plain;charset=utf-8"]) == (
        "text/plain;charset=utf-8"
    )
    assert text_type(["image/png", "text/plain;charset=iso-8859-1"]) == (
        "text/plain;charset=iso-8859-1"
    )
    assert text_type(["image/png", "text/html"]) is None


def test_budget_skips_a_format_over_its_limit_and_keeps_smaller_ones() -> None:
    budget = Budget(per_type=100, total=250)
    assert budget.admit("text/plain", 100)
    assert not budget.admit("image/png", 101)  # over the per-format limit
    assert budget.admit("text/html", 100)
    assert not budget.admit("image/bmp", 60)  # would pass the total
    assert budget.admit("text/uri-list", 50)  # still fits
    assert budget.used == 250


def test_the_transcribed_protocol_has_the_specified_opcodes() -> None:
    """Opcodes are the order of the messages in the specification."""
    assert ZwlrDataControlManagerV1.name == "zwlr_data_control_manager_v1"
    assert ZwlrDataControlManagerV1.version == 2
    assert [m.name for m in ZwlrDataControlManagerV1.requests] == [
        "create_data_source",
        "get_data_device",
        "destroy",
    ]
    assert [m.name for m in ZwlrDataControlDeviceV1.requests] == [
        "set_selection",
        "destroy",
        "set_primary_selection",
    ]
    assert [m.name for m in ZwlrDataControlDeviceV1.events] == [
        "data_offer",
        "selection",
        "finished",
        "primary_selection",
    ]
    assert [m.version for m in ZwlrDataControlDeviceV1.events] == [None, None, None, 2]
    assert [m.name for m in ZwlrDataControlSourceV1.requests] == ["offer", "destroy"]
    assert [m.name for m in ZwlrDataControlSourceV1.events] == ["send", "cancelled"]
    assert [m.name for m in ZwlrDataControlOfferV1.requests] == ["receive", "destroy"]
    assert [m.name for m in ZwlrDataControlOfferV1.events] == ["offer"]


def _pipe() -> tuple[int, int]:
    read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
    os.set_blocking(read_fd, False)
    return read_fd, write_fd


def _writer(fd: int, data: bytes, pause_s: float = 0.0) -> threading.Thread:
    """The owner's side: a blocking writer in a thread, as another client would be."""

    def run() -> None:
        try:
            time.sleep(pause_s)
            _write_all(fd, data)
        except BrokenPipeError:
            pass
        finally:
            os.close(fd)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


async def test_a_format_is_read_whole_through_a_pipe() -> None:
    read_fd, write_fd = _pipe()
    data = bytes(range(256)) * 2000  # larger than a pipe's buffer
    thread = _writer(write_fd, data)
    try:
        assert await _read(read_fd, "image/png", 5.0, 10_000_000) == data
    finally:
        os.close(read_fd)
    thread.join(5)


async def test_a_format_over_the_limit_is_skipped_without_reading_it_all() -> None:
    read_fd, write_fd = _pipe()
    thread = _writer(write_fd, b"x" * 1_000_000)
    try:
        assert await _read(read_fd, "image/bmp", 5.0, 100_000) is None
    finally:
        os.close(read_fd)  # the writer gets EPIPE and stops
    thread.join(5)
    assert not thread.is_alive()


async def test_a_format_its_owner_is_slow_to_write_is_skipped_in_time() -> None:
    read_fd, write_fd = _pipe()
    thread = _writer(write_fd, b"late", pause_s=1.0)
    try:
        # Waiting for the owner would have given b"late".
        assert await _read(read_fd, "text/html", 0.2, 1000) is None
    finally:
        os.close(read_fd)
    thread.join(5)


async def test_serving_writes_everything_to_a_slow_reader_and_closes_the_pipe() -> None:
    read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
    data = os.urandom(300_000)
    got = bytearray()

    def reader() -> None:
        while chunk := os.read(read_fd, 10_000):
            got.extend(chunk)
            time.sleep(0.001)

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    await _write(write_fd, data, 5.0)
    thread.join(5)
    os.close(read_fd)
    assert bytes(got) == data


async def test_serving_gives_up_on_a_reader_that_takes_nothing() -> None:
    read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
    await _write(write_fd, b"x" * 1_000_000, 0.2)  # the pipe fills; nobody reads
    # Our end is closed: the reader finds the end of what fitted in the pipe.
    received = 0
    while chunk := os.read(read_fd, 65536):
        received += len(chunk)
    os.close(read_fd)
    assert 0 < received < 1_000_000
