"""Helpers of the heartbeat-monitor integration tests (a module name of its own, so tests can
import it beside other directories' conftest modules).

Writers are separate processes (``writer_process.py``) so that ``kill -9`` is a real kill.
Heartbeats beat every 0.5 s and tolerate 3 misses: the tolerance is 1.5 s.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from lakewarden.events import EventConsumer, EventProducer
from lakewarden.events.topics import HEARTBEAT_EXPIRED, HEARTBEATS
from lakewarden.settings import Settings
from lakewarden.testing.kafka import heartbeat_event

MODULE = "lakewarden_services.heartbeat_monitor"
INTERVAL_S = 0.5
MISSES = 3
TOLERANCE_S = INTERVAL_S * MISSES
WRITER = Path(__file__).with_name("writer_process.py")


def isolated(settings: Settings) -> Settings:
    kafka = settings.kafka.model_copy(update={"topic_prefix": f"hb{uuid.uuid4().hex[:8]}."})
    return settings.model_copy(update={"kafka": kafka})


def env_for(settings: Settings) -> dict[str, str]:
    return {
        **os.environ,
        "LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS": settings.kafka.bootstrap_servers or "",
        "LAKEWARDEN_KAFKA__TOPIC_PREFIX": settings.kafka.topic_prefix,
    }


_counter = iter(range(10_000_000))


def new_instant() -> str:
    """A fresh 17-digit instant time (unique in the session)."""
    return f"2025031409{next(_counter):07d}"


class Writer:
    """One writer process; ``kill()`` is kill -9 and returns the wall time of the kill (ms)."""

    def __init__(self, settings: Settings, *args: str) -> None:
        # Its log (librdkafka's complaints when a broker goes away) goes to a file, not the
        # test output.
        self.log = tempfile.NamedTemporaryFile(prefix="hb-writer-", suffix=".log")  # noqa: SIM115
        self.process = subprocess.Popen(
            [sys.executable, str(WRITER), *args],
            env=env_for(settings),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            start_new_session=True,
        )

    def expect(self, prefix: str, timeout_s: float = 30.0) -> str:
        """The next output line, which must start with ``prefix``."""
        assert self.process.stdout is not None
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(self.process.stdout.readline()))  # type: ignore[union-attr]
        reader.start()
        reader.join(timeout_s)
        assert line, f"writer said nothing within {timeout_s} s (waiting for {prefix!r})"
        assert line[0].startswith(prefix), f"expected {prefix!r}, writer said {line[0]!r}"
        return line[0].strip()

    def send(self, text: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(text + "\n")
        self.process.stdin.flush()

    def kill(self) -> int:
        killed_ms = time.time_ns() // 1_000_000
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)
        return killed_ms

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()
        self.log.close()


class Expiries:
    """Every HeartbeatExpired of the test's topics, by instant, read on a background thread."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.by_instant: dict[str, list[dict[str, Any]]] = {}
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self._ready.wait(30), "expiry consumer did not start"

    def _run(self) -> None:
        consumer = EventConsumer(
            self.settings, group_id=f"expiries-{uuid.uuid4().hex[:6]}", topics=[HEARTBEAT_EXPIRED]
        )
        try:
            consumer.poll(0.5)  # joins the group (the topic exists: offsets from the start)
            self._ready.set()
            while not self._stop.is_set():
                event = consumer.poll(0.1)
                if event is not None:
                    self.by_instant.setdefault(event.record["instant"], []).append(event.record)
        finally:
            consumer.close()

    def wait_for(self, instant: str, timeout_s: float = 15.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while instant not in self.by_instant:
            assert time.monotonic() < deadline, f"no HeartbeatExpired for {instant}"
            time.sleep(0.01)
        return self.by_instant[instant][0]

    def settle(self, table: str = "t1", timeout_s: float = 30.0) -> None:
        """Wait on a marker instead of sleeping through a tolerance window: one beat for a
        fresh instant of ``table``, then silence, and back once the monitor declared it dead.
        The monitor judges in order and publishes a table's verdicts to one partition, so by
        then a full tolerance window has passed on the monitor's own clock since every verdict
        before the marker: a second verdict for an earlier instant would have been read."""
        marker = new_instant()
        producer = EventProducer(self.settings, producer_id="settle-marker")
        try:
            interval_ms = round(INTERVAL_S * 1000)  # the writers' tolerance: 3 x 0.5 s
            record = heartbeat_event(0, table_id=table, instant=marker, interval_ms=interval_ms)
            producer.send("Heartbeat", record, topic=HEARTBEATS)
            producer.flush(timeout_s)
        finally:
            producer.close(timeout_s)
        self.wait_for(marker, timeout_s)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)


def wait_for_beats(
    settings: Settings,
    instant: str,
    count: int,
    timeout_s: float = 30.0,
    *,
    stamped_from_ms: int = 0,
) -> None:
    """Until ``count`` beats of ``instant`` stamped at or after ``stamped_from_ms`` are on the
    heartbeats topic: a condition, not a guess of how long ``count`` intervals take on a
    loaded machine. The stamp is the broker's (the topic's ``LogAppendTime``), the time the
    monitor judges by, so a beat stamped at ``t`` proves the monitor's time reached ``t``."""
    consumer = EventConsumer(
        settings,
        group_id=f"beats-{uuid.uuid4().hex[:6]}",
        topics=[HEARTBEATS],
        dead_letters=False,
        auto_offset_reset="earliest",
    )
    seen = 0
    deadline = time.monotonic() + timeout_s
    try:
        while seen < count:
            assert time.monotonic() < deadline, f"{seen} of {count} beats of {instant}"
            event = consumer.poll(0.1)
            if event is None or event.record["instant"] != instant:
                continue
            if (event.timestamp_ms or 0) >= stamped_from_ms:
                seen += 1
    finally:
        consumer.close()


def spawn(writers: list[Writer], settings: Settings, *args: str) -> Writer:
    writer = Writer(settings, *args)
    writers.append(writer)
    return writer


def hold(writers: list[Writer], settings: Settings, instant: str, table: str = "t1") -> Writer:
    """A writer beating for ``instant`` until killed (ready: its first beat was acked)."""
    writer = spawn(writers, settings, "hold", table, instant, str(INTERVAL_S), str(MISSES))
    writer.expect("ready")
    return writer
