"""The baselines of the ingest benchmarks: the same Kafka stream into Spark's Parquet sink and
Delta Lake's streaming sink, and when each sink's rows become visible to a reader.

Used by ``bench_ingest`` (throughput) and ``_ingest_latency`` (end to end); its own module for
the reason ``_ingest_breakdown`` gives. Every sink reads the topic with Spark's Kafka source and
the same parse (``parse_records`` + ``route_bad_records(..., "fail")``) as ``lakewarden ingest``.

**Visibility, one method for every sink**: a row is visible when the file that commits its
batch exists, so its time is that file's mtime (each sink writes the file whole and then
publishes it under its final name):

- Parquet: ``_spark_metadata/<batch>`` (a ``spark.read.parquet`` of the sink lists exactly the
  files of logged batches);
- Delta: ``_delta_log/<version>.json`` (a Delta reader's snapshot is the log's newest version;
  its ``add`` actions name the files);
- lakewarden: ``.lakewarden/timeline/<seq>.json`` of the instant's ``completed`` entry (a
  reader's snapshot is exactly the completed instants; a row names its instant in
  ``_lw_commit_time``).

Delta's table is partitioned by ``region`` like the lakewarden table of the benchmark (a user
moving the same table to Delta keeps its partitioning); Spark's Parquet sink is left
unpartitioned, as before.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

DELTA_CONF = {
    # What Delta's quick start asks of a session.
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    # Delta rebuilds its snapshot after every commit in a shuffle of this many partitions
    # (default 50): on local[2] that made each micro-batch 2-3x slower (2.2-3.2 s vs 1.0 s per
    # 2k-record batch, measured at load ~12). The session's shuffles use 2 partitions
    # (``spark.sql.shuffle.partitions``); Delta's own are tuned alike, so the baseline is
    # Delta as a user who tuned it runs it.
    "spark.databricks.delta.snapshotPartitions": "2",
}
DELTA_PARTITION = "region"
TIMELINE = ".lakewarden/timeline"


def session(local_dir: Path) -> Any:
    """``ingest_session`` (Kafka source, ``lakewarden`` format) with Delta Lake's jars and
    session extensions too: every sink in one JVM. Raises: PeerSetupError (no Delta jars)."""
    from benchmarks._peers_setup import delta_jars
    from lakewarden.spark.ingest import ingest_session, kafka_jars

    jars = [*kafka_jars(), *delta_jars()]
    # Every batch's progress kept: the runs count what a query read from it (Spark keeps the
    # last 100 by default, fewer than a 20 s run at trigger 0 makes).
    conf = {**DELTA_CONF, "spark.sql.streaming.numRecentProgressUpdates": "100000"}
    return ingest_session(master="local[2]", local_dir=local_dir, jars=jars, conf=conf)


def parsed_stream(
    spark: Any, bootstrap: str, topic: str, config: Any, bad_dir: Path, per_batch: int | None
) -> Any:
    """The topic's records parsed into the table's columns, as ``lakewarden ingest`` does."""
    from lakewarden.spark._arrow import spark_schema
    from lakewarden.spark.ingest import parse_records, route_bad_records

    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    if per_batch is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(per_batch))
    names = spark_schema(config.pa_schema).fieldNames()
    return route_bad_records(parse_records(reader.load(), config), "fail", bad_dir, names)


def start_sink(good: Any, sink: str, out: Path, checkpoint: Path, trigger: dict[str, Any]) -> Any:
    """Start ``good`` into Spark's ``parquet`` or Delta's ``delta`` sink at ``out``."""
    writer = good.writeStream.format(sink).option("checkpointLocation", str(checkpoint))
    if sink == "delta":
        writer = writer.partitionBy(DELTA_PARTITION)
    return writer.trigger(**trigger).start(str(out))


def start_format_sink(
    good: Any, table: Path, checkpoint: Path, settings: Any, trigger: dict[str, Any]
) -> Any:
    """Start ``good`` into ``writeStream.format("lakewarden")`` at ``table`` with the run's
    ``settings`` (its services)."""
    from lakewarden.spark._options import OPT_SETTINGS, encode_settings

    writer = (
        good.writeStream.format("lakewarden")
        .option("checkpointLocation", str(checkpoint))
        .option(OPT_SETTINGS, encode_settings(settings))
    )
    return writer.trigger(**trigger).start(str(table))


def commits(out: Path, sink: str) -> Iterator[tuple[float, list[Path]]]:
    """(commit file mtime in epoch ms, the data files it makes visible) per batch of the
    ``parquet`` or ``delta`` sink at ``out``, oldest first; each data file once."""
    seen: set[Path] = set()
    for log, paths in _parquet_log(out) if sink == "parquet" else _delta_log(out):
        new = [p for p in paths if p not in seen]  # a .compact entry repeats older files
        seen.update(new)
        yield log.stat().st_mtime * 1000, new


def commit_ms(out: Path, sink: str) -> list[float]:
    """Per batch with files: its commit file's mtime minus its newest data file's (ms)."""
    return [
        logged - max(p.stat().st_mtime * 1000 for p in files)
        for logged, files in commits(out, sink)
        if files
    ]


def _parquet_log(out: Path) -> Iterator[tuple[Path, list[Path]]]:
    folder = out / "_spark_metadata"
    logs = [p for p in folder.iterdir() if not p.name.startswith(".")]
    for log in sorted(logs, key=lambda p: int(p.name.split(".")[0])):
        lines = filter(None, log.read_text().splitlines()[1:])
        yield log, [Path(json.loads(line)["path"].removeprefix("file://")) for line in lines]


def _delta_log(out: Path) -> Iterator[tuple[Path, list[Path]]]:
    from urllib.parse import unquote

    logs = sorted((out / "_delta_log").glob("*.json"), key=lambda p: int(p.stem))
    for log in logs:
        actions = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        adds = [a["add"]["path"] for a in actions if "add" in a]
        yield log, [out / unquote(path) for path in adds]


def file_latencies(out: Path, sink: str) -> tuple[list[float], int]:
    """Per row of the ``parquet`` or ``delta`` sink: its commit file's mtime minus the row's
    produce time (``updated_at``, ms); and how many batches committed rows."""
    import pyarrow.parquet as pq

    latencies: list[float] = []
    batches = 0
    for logged_ms, files in commits(out, sink):
        batches += bool(files)
        for path in files:
            produced = pq.read_table(path, columns=["updated_at"]).column(0).to_pylist()
            latencies.extend(logged_ms - p for p in produced)
    return latencies, batches


def lakewarden_latencies(uri: str) -> tuple[list[float], int]:
    """Per row of the lakewarden table: its instant's ``completed`` entry file's mtime minus
    the row's produce time (ms); and how many instants completed."""
    from lakewarden.api.table import Table
    from lakewarden.storage import open_storage
    from lakewarden.table.config import META_COMMIT_TIME
    from lakewarden.table.timeline import Timeline

    root = Path(uri)
    completed = {
        entry.instant: (root / TIMELINE / f"{entry.seq:020d}.json").stat().st_mtime * 1000
        for entry in Timeline(open_storage(uri), table="orders").entries()
        if str(entry.transition) == "completed"
    }
    rows = Table.open(uri).read(columns=["updated_at", META_COMMIT_TIME])
    instants = rows.column(META_COMMIT_TIME).to_pylist()
    produced = rows.column("updated_at").to_pylist()
    latencies = [completed[i] - p for i, p in zip(instants, produced, strict=True)]
    return latencies, len(completed)
