"""The typed ``completed`` payload: a clean's counts and a rollback's target are fields of
``CommitStats``; entries written before them (the values in ``extra_metadata``) still read the
same through ``clean_outcome()`` and ``rolled_back_target()``, and an ingestion's payload has
none of the new keys."""

from __future__ import annotations

from lakewarden.table.stats import CleanOutcome, CommitStats
from lakewarden.table.transaction import entry_payload

OLD_CLEAN = {
    "operation": "clean",
    "write_stats": [],
    "extra_metadata": {
        "files_deleted": "3",
        "bytes_deleted": "120",
        "uploads_aborted": "1",
        "earliest_retained_instant": "20240101000000000",
        "policy": "keep-latest-commits=2",
    },
}


def test_an_old_clean_entry_reads_as_the_typed_counts() -> None:
    stats = CommitStats.model_validate(OLD_CLEAN)
    assert stats.clean is None
    assert stats.clean_outcome() == CleanOutcome(
        files_deleted=3,
        bytes_deleted=120,
        uploads_aborted=1,
        earliest_retained_instant="20240101000000000",
        policy="keep-latest-commits=2",
    )
    broken = CommitStats(operation="clean", extra_metadata={"files_deleted": "x"})
    assert broken.clean_outcome() is None


def test_an_old_rollback_entry_reads_as_the_typed_target() -> None:
    old = CommitStats.model_validate({"operation": "rollback", "extra_metadata": {"target": "t"}})
    assert old.rollback_target is None and old.rolled_back_target() == "t"
    assert CommitStats(operation="rollback", rollback_target="u").rolled_back_target() == "u"


def test_new_payloads_round_trip_and_an_ingestion_has_no_new_keys() -> None:
    clean = CommitStats(operation="clean", clean=CleanOutcome(files_deleted=2, bytes_deleted=9))
    assert CommitStats.model_validate(entry_payload(clean)) == clean
    assert set(entry_payload(CommitStats(operation="insert"))) == {
        "operation",
        "write_stats",
        "replaced_file_groups",
        "failed_records",
        "extra_metadata",
    }
