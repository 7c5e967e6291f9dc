"""The table-owning services' runtime without a broker: the registry reads back what the faust
versions of the cleaner and the publisher wrote to their ``tables`` changelogs (so state
carries over) and writes the same format, and the work threads go on after a failure."""

from __future__ import annotations

import json
import threading
from typing import Any

from lakewarden_services._common.registry import TablesRegistry, changelog_key
from lakewarden_services._common.table_loop import WorkPool, is_registration
from lakewarden_services.cleaner.protocol import Trigger
from lakewarden_services.cleaner.queue import CleanQueue, Work


def _registry(produced: list[tuple[bytes, bytes, int]]) -> TablesRegistry:
    def produce(key: bytes, value: bytes, partition: int, on_delivery: Any) -> None:
        produced.append((key, value, partition))
        on_delivery(None, None)

    return TablesRegistry(produce=produce, poll=lambda _: None, accept=is_registration)


def test_the_registry_reads_what_faust_wrote_and_writes_the_same() -> None:
    entry = {"uri": "s3://lake/orders", "partition": 7}
    # The faust services' ``tables`` table: key and value through faust's json codec (the
    # bytes it wrote, as they are).
    faust_records = {
        b'"t-1"': b'{"uri":"s3://lake/orders","partition":7}',
        b'"t-2"': b'"/a/uri/only"',  # not a registration
        b"junk": b"{",
    }
    produced: list[tuple[bytes, bytes, int]] = []
    registry = _registry(produced)
    skipped = registry.load(faust_records)
    assert dict(registry) == {"t-1": entry}
    assert sorted(skipped) == sorted([b'"t-2"', b"junk"])

    registry.partition = 7
    registry["t-3"] = {"uri": "/data/t3", "partition": 7}
    registry.wait_durable(1.0)
    key, value, partition = produced[0]
    assert partition == 7 and key == changelog_key("t-3") == b'"t-3"'
    assert json.loads(value) == {"uri": "/data/t3", "partition": 7}


def test_the_work_threads_do_queued_tables_and_survive_a_failure() -> None:
    queue = CleanQueue()
    cleaned: list[str] = []
    all_done = threading.Event()

    def clean(work: Work) -> None:
        cleaned.append(work.table_id)
        if work.table_id == "bad":
            raise OSError("storage down")
        if len(cleaned) == 3:
            all_done.set()

    pool = WorkPool(queue, clean, threads=1, name="clean")
    stop = threading.Event()
    (thread,) = pool.start(stop)
    try:
        for table_id in ("bad", "a", "b"):
            queue.add(Trigger(table_id, "test"), f"/data/{table_id}", 0.0)
            pool.wake()
        assert all_done.wait(5)
    finally:
        stop.set()
        pool.wake()
        thread.join(5)
    assert cleaned == ["bad", "a", "b"] and len(queue) == 0
    queue.add(Trigger("bad", "again"), "/data/bad", 1.0)
    assert queue.take() is not None  # the failed table was released: it is done again
