"""apache/hudi#10803: data loss after compaction chose the wrong log blocks. HUDI-6758 had made
readers guess, from block sequence numbers alone, which of the blocks an instant's Spark task
attempts left were the real ones (the longest sequence, the latest on a tie); a retried or
speculative attempt's blocks could win over the accepted attempt's, and the guess was reverted.

Here each task attempt writes a log file of its own (put-if-absent, its name carries the
instant and the attempt's write token), and the completed instant's write statistics name,
per log file, the attempt the Spark driver accepted and its block count: readers and
compaction take exactly those blocks. Below a speculative attempt of the same instant leaves
a *longer* sequence of blocks (what HUDI-6758's rule would pick) in a file beside the accepted
one; reads before and after compaction return the accepted attempt's records."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from _readers_safety import new_table, rows

from lakewarden.logfile import LogWriter
from lakewarden.table.bucket import route
from lakewarden.table.files import WriteToken
from lakewarden.table.instant import Action
from lakewarden.table.merge import stamped
from lakewarden.table.mor import log_target, write_blocks
from lakewarden.table.stats import CommitStats, WorkloadProfile
from lakewarden.table.transaction import WriteTransaction
from lakewarden.tableservice import ServiceOutcome


def values(data: pa.Table) -> set[str]:
    return set(data.column("v").to_pylist())


def test_hudi_10803_the_accepted_attempts_blocks_win_over_a_longer_speculative_sequence(
    tmp_path: Path,
) -> None:
    table = new_table(tmp_path / "t", table_type="mor", buckets=1, partition_by=[])
    table.write(rows("base"), "insert")
    (file_slice,) = table.snapshot().slices.values()
    txn = WriteTransaction.begin(
        table.timeline_log,
        table.coordinator,
        table.table_id,
        operation="upsert",
        actor="spark-driver",
        action=Action.DELTACOMMIT,
    )

    def records(version: str) -> pa.Table:
        routed = route(rows(version, ts=2), table.config).popitem()[1]
        return stamped(routed, txn.instant, table.config, "upsert")

    with txn.heartbeat():
        txn.inflight(WorkloadProfile(operation="upsert", file_groups=(file_slice.file_group,)))
        accepted = write_blocks(
            table.storage,
            file_slice,
            records("accepted"),
            instant=txn.instant,
            attempt="attempt-0",
            token=WriteToken(0, 0, 0),
            delete=False,
        )
        # The speculative attempt of the same task: three blocks, a longer sequence.
        key = log_target(file_slice, WriteToken(0, 0, 1), txn.instant, skip=1)
        speculative = LogWriter(
            table.storage, key, instant=txn.instant, attempt="attempt-1", append=False
        )
        for _ in range(3):
            speculative.add_data(records("speculative"))
        assert speculative.flush().block_count == 3 > accepted.log_block_count == 1
        txn.complete(CommitStats(operation="upsert", write_stats=(accepted,)))

    assert values(table.read()) == {"accepted"}
    plan = table.schedule_compaction()
    assert plan is not None
    assert table.run_table_service(plan).outcome is ServiceOutcome.COMPLETED
    (compacted,) = table.snapshot().slices.values()
    assert compacted.log_files == ()
    assert values(table.read()) == {"accepted"}
