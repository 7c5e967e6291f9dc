"""job-committer on S3 (SeaweedFS): task attempts upload to the final keys and hold back
completion; the service completes the accepted attempts' uploads and the losers' are aborted."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from _jc_helpers import MODULE, SCHEMA, Driver, as_set, data_files, rows

from lakewarden.clients import CommitClient
from lakewarden.settings import Settings
from lakewarden.table.instant import Transition
from lakewarden.table.table import Table
from lakewarden_services._common.process import ServiceProcess

pytestmark = [pytest.mark.timeout(180), pytest.mark.usefixtures("lock_service")]


@pytest.fixture(scope="module")
def both(jc_settings: Settings, s3_settings: Settings) -> Settings:
    return jc_settings.model_copy(update={"s3": s3_settings.s3})


@pytest.fixture(scope="module")
def s3_committer(both: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    s3 = both.s3
    env = {
        "LAKEWARDEN_S3__ENDPOINT_URL": s3.endpoint_url or "",
        "LAKEWARDEN_S3__REGION": s3.region,
        "LAKEWARDEN_S3__ACCESS_KEY_ID": s3.access_key_id.get_secret_value(),
        "LAKEWARDEN_S3__SECRET_ACCESS_KEY": s3.secret_access_key.get_secret_value(),
    }
    home = tmp_path_factory.mktemp("job-committer-s3")
    with ServiceProcess(MODULE, both, home=home, extra_env=env):
        yield


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
