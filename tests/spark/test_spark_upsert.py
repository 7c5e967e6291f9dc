"""``lakewarden.spark.write``: upsert and delete by record key and ordering field, the
consolidation of append groups, and two concurrent upserts on overlapping keys."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from _spark_helpers import make_table, rows, sorted_rows, spark_df, spark_rows, states

import lakewarden
import lakewarden.spark
from lakewarden.api.table import Table
from lakewarden.table.conflicts import OverlappingCommitConflict
from lakewarden.table.instant import Transition
from lakewarden.table.writer import CommitResult
from lakewarden.testing import wait_until

pytestmark = pytest.mark.spark


def test_upsert_and_delete_by_key_and_ordering_field(spark: Any, table_dir: Path) -> None:
    table = make_table(table_dir, buckets=3)
    uri = str(table_dir)
    # Appended through the plain format: rows land in per-task append groups of each bucket.
    spark_df(spark, rows(range(40), ts=5)).write.format("lakewarden").mode("append").save(uri)

    newer = rows(range(30, 50), ts=7, note="newer")  # 30-39 updated, 40-49 inserted
    older = rows(range(0, 5), ts=1, note="older")  # loses: stored ts=5 is larger
    dupes = pa.concat_tables([rows([60], ts=3, note="low"), rows([60], ts=9, note="high")])
    result = lakewarden.spark.write(
        spark_df(spark, pa.concat_tables([newer, older, dupes]), partitions=3), uri, "upsert"
    )

    expected = {r["id"]: r for r in sorted_rows(rows(range(40), ts=5))}
    expected.update({r["id"]: r for r in sorted_rows(newer)})
    expected[60] = sorted_rows(rows([60], ts=9, note="high"))[0]
    back = spark_rows(spark.read.format("lakewarden").load(uri))
    assert back == [expected[k] for k in sorted(expected)]
    # The upsert consolidated each touched bucket into its canonical file group.
    assert result.stats.replaced_file_groups
    assert all(s.file_group.file_id.endswith("-0000") for s in result.stats.write_stats)

    keys = spark.createDataFrame(
        [(i, "eu" if i % 3 else "us") for i in range(0, 60, 2)], "id long, region string"
    )
    deleted = lakewarden.spark.write(keys, uri, "delete")
    remaining = [expected[k] for k in sorted(expected) if k % 2 or k >= 60]
    assert spark_rows(spark.read.format("lakewarden").load(uri)) == remaining
    assert deleted.stats.deleted_records == len(expected) - len(remaining)
    assert sorted_rows(lakewarden.read(uri)) == remaining
    assert states(table) == [Transition.COMPLETED] * 3


def test_concurrent_upserts_one_commits_the_other_fails_with_the_conflict(
    spark: Any, table_dir: Path
) -> None:
    table = make_table(table_dir, buckets=1, partitioned=False)
    uri = str(table_dir)
    lakewarden.spark.write(spark_df(spark, rows(range(10))), uri, "insert")
    outcomes: dict[str, CommitResult | BaseException] = {}

    def upsert(name: str, note: str, options: dict[str, str]) -> None:
        df = spark_df(spark, rows(range(5, 15), ts=2, note=note))
        try:
            outcomes[name] = lakewarden.spark.write(df, uri, "upsert", options=options)
        except BaseException as err:  # noqa: BLE001 - the test inspects it
            outcomes[name] = err

    # "slow" is held in its task until "fast" (requested later) has completed: a condition,
    # not a sleep "fast" had to beat on a loaded machine.
    release = table_dir.parent / f"{table_dir.name}-release-slow"
    slow = threading.Thread(
        target=upsert, args=("slow", "slow", {"lakewarden.test.hold_partition": f"0:{release}"})
    )
    slow.start()
    wait_until(
        lambda: any(i.is_pending for i in Table.open(uri).timeline()),
        120,
        "the slow upsert to request its instant",
    )
    upsert("fast", "fast", {})
    release.touch()
    slow.join(timeout=120)

    assert isinstance(outcomes["fast"], CommitResult), outcomes["fast"]
    error = outcomes["slow"]
    assert isinstance(error, OverlappingCommitConflict), error
    assert error.other_instant == outcomes["fast"].instant
    expected = {r["id"]: r for r in sorted_rows(rows(range(10)))}
    expected.update({r["id"]: r for r in sorted_rows(rows(range(5, 15), ts=2, note="fast"))})
    assert sorted_rows(Table.open(uri).read()) == [expected[k] for k in sorted(expected)]
    assert states(table) == [Transition.COMPLETED, Transition.ROLLED_BACK, Transition.COMPLETED]
