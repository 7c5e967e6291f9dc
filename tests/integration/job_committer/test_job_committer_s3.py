"""job-committer on S3 (SeaweedFS): task attempts upload to the final keys and hold back
completion; the service completes the accepted attempts' uploads and the losers' are aborted."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from _jc_helpers import SCHEMA, Driver, as_set, data_files, rows

from lakewarden.api.table import Table
from lakewarden.clients import CommitClient
from lakewarden.settings import Settings
from lakewarden.table.instant import Transition

pytestmark = [pytest.mark.timeout(180), pytest.mark.usefixtures("lock_service")]


def test_the_service_completes_the_accepted_uploads_on_s3(
    both: Settings, s3_bucket: str, s3_committer: None, tmp_path: Path
) -> None:
    uri = f"s3://{s3_bucket}/{tmp_path.name}-{uuid.uuid4().hex[:6]}/orders"
    table = Table.create(
        uri, name="orders", record_key="id", schema=SCHEMA, partition_by=["region"], settings=both
    )
    driver = Driver.begin(table)
    first = driver.task(0, rows((1, "eu", "a"), (2, "us", "b")))
    winner = driver.task(1, rows((3, "apac", "c")))
    driver.task(1, rows((3, "apac", "zombie")), attempt=1)  # never completed: aborted
    assert data_files(table) == []  # pending uploads are not objects yet
    assert len(list(table.storage.list_multipart_uploads("region=apac/"))) == 2

    with CommitClient(both) as client:
        reply = client.commit(driver.request([first, winner]), timeout_s=60)

    reread = Table.open(uri, settings=both)
    assert as_set(reread.read()) == {(1, "eu", "a"), (2, "us", "b"), (3, "apac", "c")}
    assert data_files(reread) == sorted(s.path for s in reply.stats.write_stats)
    [state] = reread.timeline()
    assert state.state is Transition.COMPLETED
    for area in ("region=apac/", "region=eu/", "region=us/"):  # the loser's upload aborted
        assert list(table.storage.list_multipart_uploads(area)) == []
