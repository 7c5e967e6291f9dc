"""``free_port`` draws listening ports from below the kernel's ephemeral range: the local port of
an outgoing connection comes from that range, and a broker that binds its listener seconds after
its ports were picked once lost a CI run to a client socket sitting on it."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from lakewarden.devstack import processes


def test_ports_come_from_below_the_ephemeral_range_and_are_free() -> None:
    floor = processes._ephemeral_floor()
    for _ in range(20):
        port = processes.free_port()
        assert processes._LISTEN_PORT_FLOOR <= port < floor
        with socket.socket() as sock:
            sock.bind((processes.LOOPBACK, port))


def test_a_port_in_use_is_never_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first draw lands on a port a listener holds: the next draw is taken instead."""
    real_draw = processes.secrets.randbelow
    with socket.socket() as held:
        held.bind((processes.LOOPBACK, 0))
        taken = held.getsockname()[1]
        held.listen()
        draws = iter([taken - processes._LISTEN_PORT_FLOOR])
        monkeypatch.setattr(processes, "_ephemeral_floor", lambda: 65000)
        monkeypatch.setattr(processes.secrets, "randbelow", lambda n: next(draws, real_draw(n)))
        port = processes.free_port()
        assert next(draws, None) is None  # the held port was drawn first
        assert port != taken
        with socket.socket() as sock:
            sock.bind((processes.LOOPBACK, port))


def test_without_a_range_to_draw_from_the_os_picks(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    narrow = tmp_path / "range"
    narrow.write_text("20100\t60999\n")
    monkeypatch.setattr(processes, "_EPHEMERAL_RANGE_FILE", narrow)

    def no_draw(_n: int) -> int:
        raise AssertionError("a range of 100 ports is too narrow to draw from")

    monkeypatch.setattr(processes.secrets, "randbelow", no_draw)
    with socket.socket() as sock:
        sock.bind((processes.LOOPBACK, processes.free_port()))
