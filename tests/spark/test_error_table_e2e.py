"""The error table (RFC-20) end to end: Spark writes with 1% bad rows, a real broker, the
registered services as real processes, and the error-table sink committing what was accepted.

The module starts a dev stack (``lakewarden.devstack.DevStack``: Kafka on free ports and every
registered service except error-sink, so a job-committer the writer may call is there once it
is registered), plus the error-sink as its own ``ServiceProcess`` on the stack's broker, so the
global-mode test can swap it for a sink configured with a global error table. Spark reaches
them through the ``lakewarden.settings`` write option (Kafka configured, error table on): the
driver takes its lock from timeline-lock and beats to heartbeat-monitor (``KafkaCoordinator``),
each task publishes its bad rows as ``ErrorRecord`` events.

Invariant 8: the error table holds exactly the failed records of committed attempts.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lakewarden
from lakewarden.api.table import Table
from lakewarden.commit import ManifestCommitter
from lakewarden.devstack import SERVICES, DevSettings, DevStack
from lakewarden.errortable import error_table_location
from lakewarden.errortable.acceptance import job_id_of
from lakewarden.errortable.testing import SettleMarker, settle_marker
from lakewarden.events import EventProducer, default_codec
from lakewarden.events.topics import ERRORS
from lakewarden.settings import ErrorTableSettings, KafkaSettings, Settings
from lakewarden.spark._options import encode_settings
from lakewarden.table.bucket import render_partition_path
from lakewarden.table.config import NotATableError
from lakewarden.table.instant import INGESTION_ACTIONS, Transition
from lakewarden.testing import wait_until
from lakewarden.testing.faults import Fault, fault_plan, first_attempt
from lakewarden_services._common.process import ServiceProcess

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow]

ROWS = 3_000  # every 100th row is bad: 30 bad rows, 2 970 good ones
PARTITIONS = 4
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("region", pa.string()),
        ("qty", pa.int32()),
        ("amount", pa.float64()),
        ("note", pa.string()),
    ]
)
# Row n is bad when n % 100 == 42: qty 2^40 (does not fit int32), or every other time a null
# record key. ``note`` names each row whatever happens to its key.
COLUMNS = [
    "case when id % 200 = 142 then null else id end as id",
    "case when id % 3 = 0 then 'us' else 'eu' end as region",
    "case when id % 200 = 42 then cast(1099511627776 as bigint) else id % 1000 end as qty",
    "id * 1.5 as amount",
    "concat('row-', cast(id as string)) as note",
]
BAD = sorted(n for n in range(ROWS) if n % 100 == 42)
SINK = "lakewarden_services.error_sink"
GLOBAL_NAME = "all_errors"


@dataclass
class Stack:
    """The running stack: client settings (Kafka) and the error-sink process."""

    settings: Settings
    sink: ServiceProcess
    home: Path

    def write_settings(self) -> str:
        """The ``lakewarden.settings`` option: this broker, the error table on."""
        on = self.settings.model_copy(update={"error_table": ErrorTableSettings(enabled=True)})
        return encode_settings(on)

    def metric(self, prefix: str) -> float:
        return self.sink.metric(prefix)


def _sink(settings: Settings, home: Path, **env: str) -> ServiceProcess:
    home.mkdir(parents=True, exist_ok=True)
    extra = {"LAKEWARDEN_ERROR_SINK_CHECK_INTERVAL_S": "0.3", **env}
    return ServiceProcess(SINK, settings, home=home, extra_env=extra)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    home = tmp_path_factory.mktemp("error-table-e2e")
    dev = DevStack(home / "state", Settings())
    services = [
        dataclasses.replace(spec, health_port=0) for spec in SERVICES if spec.module != SINK
    ]
    try:
        record = dev.up(
            dev=DevSettings(kafka_port=0, kafka_controller_port=0),
            with_s3=False,
            services=services,
        )
        settings = Settings(kafka=KafkaSettings(bootstrap_servers=record.bootstrap_servers))
        sink = _sink(settings, home / "sink")
        sink.start()
        try:
            yield Stack(settings, sink, home)
        finally:
            sink.stop()
    finally:
        dev.down()


# -- helpers ------------------------------------------------------------------------------------


def make_table(root: Path, name: str) -> Table:
    return Table.create(
        str(root), name=name, record_key="id", schema=SCHEMA, partition_by=["region"], buckets=2
    )


def dataframe(spark: Any) -> Any:
    return spark.range(ROWS, numPartitions=PARTITIONS).selectExpr(*COLUMNS)


def write(spark: Any, stack: Stack, root: Path, *faults: Fault) -> None:
    writer = dataframe(spark).write.format("lakewarden").mode("append")
    writer = writer.option("lakewarden.settings", stack.write_settings())
    with fault_plan(*faults):
        writer.save(str(root))


def read_or_none(uri: str) -> pa.Table | None:
    try:
        return lakewarden.read(uri)
    except NotATableError:
        return None


def count(uri: str) -> int:
    found = read_or_none(uri)
    return 0 if found is None else found.num_rows


def wait_for(check: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    wait_until(check, timeout_s=timeout_s, what=what)


def settled(stack: Stack, table: Table, errors_uri: str) -> SettleMarker:
    """Once this returns, the stack's error-sink has settled every error record of ``table``
    the write published: a duplicate commit would be in the error table by now."""
    with EventProducer(stack.settings, producer_id="settle-marker") as producer:
        return settle_marker(producer, table, errors_uri)


def without(errors: pa.Table, marker: SettleMarker) -> pa.Table:
    return errors.filter(pc.not_equal(errors.column("uid"), marker.uid))


def local_errors_uri(table: Table) -> str:
    return error_table_location(table.uri, table.name, ErrorTableSettings()).uri


def note_number(note: str) -> int:
    return int(note.removeprefix("row-"))


def completed_instant(
    table: Table, marker: SettleMarker | None = None
) -> tuple[str, str, frozenset[str]]:
    """(instant, job id, accepted attempts) of the table's one completed write (the stack runs
    the cleaner, whose clean instants of the write's leftovers are not the write's; a settle
    marker's write is not the test's either)."""
    completed = [
        i
        for i in table.state().completed()
        if i.action in INGESTION_ACTIONS and (marker is None or i.instant != marker.instant)
    ]
    assert len(completed) == 1, [(i.instant, i.action) for i in table.timeline()]
    inst = completed[0]
    job_id = job_id_of(inst)
    assert job_id is not None
    summary = ManifestCommitter(table.storage, job_id).summary()
    assert summary is not None and summary.state == "COMMITTED"
    return inst.instant, job_id, frozenset(summary.committed_files)


def assert_good_rows_committed(table: Table) -> None:
    data = lakewarden.read(table.uri)
    assert data.num_rows == ROWS - len(BAD)
    assert sorted(note_number(n) for n in data.column("note").to_pylist()) == [
        n for n in range(ROWS) if n not in BAD
    ]
    completed = table.state().completed()
    assert completed[0].commit is not None
    assert completed[0].commit.failed_records == len(BAD)


def assert_error_rows(table: Table, errors: pa.Table, marker: SettleMarker) -> list[dict[str, str]]:
    """Exactly the bad rows of ``table``, once each, with their context (the settle marker's
    record aside); the contexts."""
    mine = without(errors, marker)
    mine = mine.filter(pc.equal(mine.column("source_table"), table.name))
    instant, job_id, accepted = completed_instant(table, marker)
    records = [json.loads(r) for r in mine.column("record").to_pylist()]
    assert sorted(note_number(r["note"]) for r in records) == BAD  # once each, no other
    contexts = [dict(c) for c in mine.column("context").to_pylist()]
    for record, context in zip(records, contexts, strict=True):
        n = note_number(record["note"])
        region = "us" if n % 3 == 0 else "eu"
        assert context["commitTime"] == instant
        assert context["tableName"] == table.name
        assert context["tableId"] == table.table_id
        assert context["tableUri"] == table.uri.removeprefix("file://")  # as saved to
        assert context["partitionPath"] == render_partition_path(["region"], [region])
        assert context["recordKey"] == ("" if n % 200 == 142 else str(n))
        assert context["jobId"] == job_id
        assert context["taskAttempt"] in accepted
    assert set(mine.column("source_instant").to_pylist()) == {instant}
    assert set(mine.column("source_table_id").to_pylist()) == {table.table_id}
    return contexts


def errors_in_kafka(settings: Settings, instant: str) -> int:
    """How many ``ErrorRecord`` events of ``instant`` the errors topic holds."""
    from confluent_kafka import Consumer, TopicPartition

    topic = ERRORS.name(settings)
    consumer = Consumer(
        settings.kafka.librdkafka_config(
            group_id=f"e2e-peek-{uuid.uuid4().hex}", enable_auto_commit=False
        )
    )
    codec = default_codec()
    found = 0
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {}
        for p in partitions:
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            ends[p] = high
        consumer.assign([TopicPartition(topic, p, 0) for p, high in ends.items() if high > 0])
        position = dict.fromkeys(ends, 0)
        deadline = time.monotonic() + 30
        while any(position[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None or msg.error() is not None:
                continue
            position[int(msg.partition() or 0)] = int(msg.offset() or 0) + 1
            _, record = codec.decode(msg.value() or b"")
            if (record.get("context") or {}).get("commitTime") == instant:
                found += 1
    finally:
        consumer.close()
    return found


# -- scenarios ----------------------------------------------------------------------------------


def test_bad_rows_go_to_the_error_table_good_rows_to_the_table(
    spark: Any, stack: Stack, tmp_path: Path
) -> None:
    table = make_table(tmp_path / "orders", "orders")
    write(spark, stack, tmp_path / "orders")

    assert_good_rows_committed(table)
    uri = local_errors_uri(table)
    wait_for(lambda: count(uri) >= len(BAD), "the bad rows in the error table")
    marker = settled(stack, table, uri)
    errors = without(lakewarden.read(uri), marker)
    contexts = assert_error_rows(table, errors, marker)
    assert {c["operation"] for c in contexts} == {"insert"}
    messages = errors.column("message").to_pylist()
    assert sum("does not fit the table type int32" in m for m in messages) == len(BAD) // 2
    assert sum("null record key" in m for m in messages) == len(BAD) // 2
    assert len(Table.open(uri).state().completed()) == 2  # one error-table instant, the marker's


# Kafka records of an ingestion: (partition, value); the bad ones with their reason.
KAFKA_GOOD = [
    (0, b'{"id": 1, "region": "eu", "qty": 1, "amount": 1.5, "note": "a"}'),
    (1, b'{"id": 2, "region": "us", "qty": 2, "amount": 2.5, "note": "b"}'),
    (1, b'{"id": 3, "region": "eu", "qty": 3, "amount": 3.5, "note": "c"}'),
]
KAFKA_BAD = {
    (0, b"this is not json"): "malformed JSON",
    (1, b'{"region": "eu", "qty": 4}'): "missing record key 'id'",
    (1, b'{"id": 5, "qty": "many"}'): "does not fit the table schema",
    (0, b"[1, 2, 3]"): "malformed JSON",
}


def test_bad_kafka_records_of_an_ingestion_go_to_the_error_table(
    spark: Any, stack: Stack, tmp_path: Path
) -> None:
    """``lakewarden ingest --bad-records error-table`` after its Kafka source: the parsed
    records (good and bad) reach the writer, which publishes the bad ones with their Kafka
    coordinates under the batch's instant (a batch write here: the same task code as a
    micro-batch; the query around it is test_demo's)."""
    from click.testing import CliRunner

    from lakewarden.cli import cli
    from lakewarden.spark._ingest_records import parse_records, route_bad_records

    table = make_table(tmp_path / "orders", "orders")
    records = [*KAFKA_GOOD, *KAFKA_BAD]
    rows = [
        ("orders-in", partition, offset, None, None, value)
        for offset, (partition, value) in enumerate(records)
    ]
    kafka_schema = (
        "topic string, partition int, offset long, timestamp timestamp, key binary, value binary"
    )
    raw = spark.createDataFrame(rows, schema=kafka_schema).repartition(2)
    routed = route_bad_records(
        parse_records(raw, table.config), "error-table", tmp_path / "unused", SCHEMA.names
    )
    (
        routed.write.format("lakewarden")
        .mode("append")
        .option("lakewarden.settings", stack.write_settings())
        .option("lakewarden.ingest_errors", "true")
        .save(table.uri)
    )

    assert sorted(lakewarden.read(table.uri).column("id").to_pylist()) == [1, 2, 3]
    instant, job_id, accepted = completed_instant(table)
    assert table.state().completed()[0].commit.failed_records == len(KAFKA_BAD)  # type: ignore[union-attr]
    uri = local_errors_uri(table)
    wait_for(lambda: count(uri) >= len(KAFKA_BAD), "the bad Kafka records in the error table")
    marker = settled(stack, table, uri)
    errors = without(lakewarden.read(uri), marker)
    assert errors.num_rows == len(KAFKA_BAD)  # once each
    found = {}
    for context, record, message in zip(
        errors.column("context").to_pylist(),
        errors.column("record").to_pylist(),
        errors.column("message").to_pylist(),
        strict=True,
    ):
        context = dict(context)
        assert (context["commitTime"], context["jobId"]) == (instant, job_id)
        assert context["taskAttempt"] in accepted
        assert context["kafkaTopic"] == "orders-in"
        offset = int(context["kafkaOffset"])
        partition, value = records[offset]
        assert int(context["kafkaPartition"]) == partition
        assert json.loads(record)["value"] == value.decode()
        assert message.startswith(f"bad Kafka record at topic orders-in partition {partition} ")
        found[(partition, value)] = message
    assert set(found) == set(KAFKA_BAD)
    for key, reason in KAFKA_BAD.items():
        assert reason in found[key]

    shown = CliRunner().invoke(cli, ["errors", "show", table.uri], env={"COLUMNS": "250"})
    assert shown.exit_code == 0, shown.output
    assert "failed records of" in shown.stdout and "kafka" in shown.stdout
    for offset in range(len(KAFKA_GOOD), len(records)):
        assert f"orders-in/{records[offset][0]}@{offset}" in shown.stdout


def test_a_retried_task_leaves_no_duplicate_error_rows(
    spark: Any, stack: Stack, tmp_path: Path
) -> None:
    table = make_table(tmp_path / "orders", "orders")
    dropped_before = stack.metric('lakewarden_error_sink_dropped_total{reason="not_accepted"}')
    # Attempt 0 of partition 1 publishes its bad rows, commits its task, then fails.
    write(spark, stack, tmp_path / "orders", first_attempt(1))

    assert_good_rows_committed(table)
    instant, _, accepted = completed_instant(table)
    # attempt_<job>_<task>_<Spark's task attempt id>: one accepted attempt of partition 1.
    (_winner,) = [a for a in accepted if int(a.rsplit("_", 2)[1]) == 1]
    uri = local_errors_uri(table)
    wait_for(lambda: count(uri) >= len(BAD), "the bad rows in the error table")
    # The failed attempt's records reached the sink (so a duplicate was possible) and were
    # dropped as not accepted.
    per_partition = len(BAD) // PARTITIONS
    wait_for(
        lambda: stack.metric('lakewarden_error_sink_dropped_total{reason="not_accepted"}')
        - dropped_before
        >= per_partition,
        "the failed attempt's records dropped",
    )
    assert errors_in_kafka(stack.settings, instant) > len(BAD)
    marker = settled(stack, table, uri)
    contexts = assert_error_rows(table, lakewarden.read(uri), marker)
    assert {c["taskAttempt"] for c in contexts} <= accepted  # none of the failed attempt's


def test_an_aborted_instant_leaves_no_error_rows(spark: Any, stack: Stack, tmp_path: Path) -> None:
    table = make_table(tmp_path / "orders", "orders")
    discarded_before = stack.metric('lakewarden_error_sink_sources_total{result="discarded"}')
    # Partitions 0-2 write and publish their bad rows; every attempt of partition 3 fails,
    # so the job aborts and the instant is rolled back.
    every_attempt = Fault(point="spark.task.before_write", action="raise", where={"partition": 3})
    with pytest.raises(Exception, match="injected failure at spark.task.before_write"):
        write(spark, stack, tmp_path / "orders", every_attempt)

    # Only the write's instants: the stack's cleaner may clean the rolled-back files with an
    # instant of its own.
    instants = [i for i in table.timeline() if i.action in INGESTION_ACTIONS]
    assert [i.state for i in instants] == [Transition.ROLLED_BACK]
    assert errors_in_kafka(stack.settings, instants[0].instant) > 0  # the sink had some
    wait_for(
        lambda: stack.metric('lakewarden_error_sink_sources_total{result="discarded"}')
        > discarded_before,
        "the sink to discard the aborted instant's records",
    )
    marker = settled(stack, table, local_errors_uri(table))
    errors = lakewarden.read(local_errors_uri(table))
    assert errors.column("uid").to_pylist() == [marker.uid]  # the aborted instant's: none
    assert lakewarden.read(table.uri).num_rows == 0


def test_global_mode_collects_two_tables_errors_in_one_table(
    spark: Any, stack: Stack, tmp_path: Path
) -> None:
    base = tmp_path / "global"
    stack.sink.stop()
    global_sink = _sink(
        stack.settings,
        stack.home / "global-sink",
        LAKEWARDEN_ERROR_TABLE__NAME=GLOBAL_NAME,
        LAKEWARDEN_ERROR_TABLE__BASE_PATH=str(base),
    )
    global_sink.start()
    try:
        tables = []
        for name in ("orders", "payments"):
            tables.append(make_table(tmp_path / name, name))
            write(spark, stack, tmp_path / name)
        uri = str(base / GLOBAL_NAME)
        wait_for(lambda: count(uri) >= 2 * len(BAD), "both tables' errors in the global table")
        markers = [settled(stack, table, uri) for table in tables]
        errors = lakewarden.read(uri)
        assert errors.num_rows == 2 * len(BAD) + len(markers)
        for table, marker in zip(tables, markers, strict=True):
            assert_good_rows_committed(table)
            assert_error_rows(table, errors, marker)
            assert not Path(local_errors_uri(table)).exists()
    finally:
        global_sink.stop()
        stack.sink.start()


def test_an_upsert_whose_keys_route_in_python_sends_a_null_key_to_the_error_table(
    spark: Any, stack: Stack, tmp_path: Path
) -> None:
    """Keys given as text (not the table's int64) are routed to their file groups in Python
    (``_helper.python_file_groups``): a null key or one that is not a number goes to the error
    table instead of failing the upsert."""
    table = make_table(tmp_path / "orders", "orders")
    text_keys = [
        "case when id = 7 then null when id = 9 then 'nine' else cast(id as string) end as id",
        *COLUMNS[1:],
    ]
    df = spark.range(40, numPartitions=2).selectExpr(*text_keys)
    on = stack.settings.model_copy(update={"error_table": ErrorTableSettings(enabled=True)})

    result = lakewarden.spark.write(df, table.uri, "upsert", settings=on)

    data = lakewarden.read(table.uri)
    assert sorted(data.column("id").to_pylist()) == [n for n in range(40) if n not in (7, 9)]
    assert table.state().get(result.instant).commit.failed_records == 2  # type: ignore[union-attr]
    uri = local_errors_uri(table)
    wait_for(lambda: count(uri) >= 2, "the two bad keys in the error table")
    errors = lakewarden.read(uri)
    notes = sorted(json.loads(r)["note"] for r in errors.column("record").to_pylist())
    assert notes == ["row-7", "row-9"]
    messages = " ".join(errors.column("message").to_pylist())
    assert "null record key" in messages and "does not fit the table type int64" in messages
