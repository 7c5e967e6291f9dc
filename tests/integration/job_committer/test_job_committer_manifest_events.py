"""job-committer on S3 (SeaweedFS) commits from the manifests TaskManifest events carry: the
writer announces each accepted attempt's manifest on the real broker just before the request,
and the job commit reads none of them from storage (its ``_SUCCESS`` statistics count the
reads the storage layer metered); a pointer-only announcement is read and still commits."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from _jc_helpers import SCHEMA, Driver, as_set, rows

from lakewarden.api.table import Table
from lakewarden.clients import AttemptManifest, CommitClient
from lakewarden.commit.stages.load import FROM_EVENTS, FROM_STORAGE
from lakewarden.settings import Settings

pytestmark = [pytest.mark.timeout(240), pytest.mark.usefixtures("lock_service")]
REGIONS = ("eu", "us", "apac", "af")
READS = "op_read_manifest"  # GETs of manifests, metered by the committer's storage layer


def _driver(both: Settings, bucket: str, tmp_path: Path) -> tuple[Driver, list[str]]:
    uri = f"s3://{bucket}/{tmp_path.name}-{uuid.uuid4().hex[:6]}/orders"
    table = Table.create(
        uri, name="orders", record_key="id", schema=SCHEMA, partition_by=["region"], settings=both
    )
    driver = Driver.begin(table)
    accepted = [driver.task(i, rows((i, region, f"v{i}"))) for i, region in enumerate(REGIONS)]
    return driver, accepted


def _announced(driver: Driver, attempt: str, *, inline: bool = True) -> AttemptManifest:
    result = driver.results[attempt]
    saved = result.saved if inline else None
    return AttemptManifest(attempt, result.manifest_key, result.files, result.bytes, saved)


def _counters(driver: Driver) -> dict[str, int]:
    summary = driver.committer.summary()
    assert summary is not None and summary.state == "COMMITTED"
    return {k: int(v) for k, v in summary.iostatistics["counters"].items()}


def test_a_commit_from_events_reads_no_manifest_on_s3(
    both: Settings, s3_bucket: str, s3_committer: None, tmp_path: Path
) -> None:
    driver, accepted = _driver(both, s3_bucket, tmp_path)
    manifests = [_announced(driver, a) for a in accepted]
    with CommitClient(both) as client:
        client.commit(driver.request(accepted), timeout_s=90, manifests=manifests)
    counters = _counters(driver)
    assert counters.get(READS, 0) == 0, counters
    assert counters[FROM_EVENTS] == 4 and counters.get(FROM_STORAGE, 0) == 0
    reread = Table.open(driver.table.uri, settings=both)
    assert as_set(reread.read()) == {(i, r, f"v{i}") for i, r in enumerate(REGIONS)}


def test_a_pointer_only_manifest_is_read_and_the_job_commits_on_s3(
    both: Settings, s3_bucket: str, s3_committer: None, tmp_path: Path
) -> None:
    driver, accepted = _driver(both, s3_bucket, tmp_path)
    pointer = accepted[2]
    manifests = [_announced(driver, a, inline=a != pointer) for a in accepted]
    with CommitClient(both) as client:
        client.commit(driver.request(accepted), timeout_s=90, manifests=manifests)
    counters = _counters(driver)
    assert counters[READS] == 1, counters
    assert counters[FROM_EVENTS] == 3 and counters[FROM_STORAGE] == 1
    reread = Table.open(driver.table.uri, settings=both)
    assert len(reread.read()) == 4
