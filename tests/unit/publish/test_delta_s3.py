"""On SeaweedFS S3: deltalake and Polars read a published copy-on-write table as lakewarden
does, after inserts, an upsert, a delete, a clustering and a clean."""

from __future__ import annotations

import json
from pathlib import Path

import deltalake
import polars as pl
from delta_checks import polars_rows, row_set
from test_delta_readers import SCHEMA, ingest, rows

from lakewarden.api.table import Table
from lakewarden.devstack.s3 import SeaweedS3
from lakewarden.settings import Settings
from lakewarden.table.clean.policy import CleanPolicy
from lakewarden.table.coordinator import EmbeddedCoordinator


def storage_options(s3: SeaweedS3) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL": s3.endpoint_url,
        "AWS_ACCESS_KEY_ID": s3.access_key,
        "AWS_SECRET_ACCESS_KEY": s3.secret_key,
        "AWS_REGION": s3.region,
        "AWS_ALLOW_HTTP": "true",
    }


def test_published_table_on_s3_reads_the_same_in_deltalake_and_polars(
    seaweed_s3: SeaweedS3, s3_settings: Settings, s3_bucket: str, tmp_path: Path
) -> None:
    uri = f"s3://{s3_bucket}/{tmp_path.name}/orders"
    table = Table.create(
        uri,
        name="orders",
        record_key="id",
        schema=SCHEMA,
        partition_by=["region"],
        ordering_field="ts",
        buckets=2,
        publish_delta=True,
        settings=s3_settings,
        coordinator=EmbeddedCoordinator(),
    )
    ingest(table)
    clustering = table.schedule_clustering(sort_by=["ts"])
    assert clustering is not None
    table.run_table_service(clustering)
    table.write(rows((7, "eu", 9, "late")), "upsert")
    cleaned = table.clean(CleanPolicy(commits_retained=2, retention_window_s=0))
    assert cleaned.files_deleted > 0
    options = storage_options(seaweed_s3)
    columns = SCHEMA.names
    expected = row_set(table.read(), columns)
    delta = deltalake.DeltaTable(uri, storage_options=options)
    assert delta.version() == len(table.state().completed())
    assert row_set(delta.to_pyarrow_table(), columns) == expected
    assert polars_rows(pl.read_delta(uri, storage_options=options), columns) == expected
    # An older version still readable (not cleaned): the one of the clustering.
    for version in range(delta.version(), 0, -1):
        lines = table.storage.read(f"_delta_log/{version:020d}.json").decode().splitlines()
        info = json.loads(lines[0])["commitInfo"]["operationParameters"]
        if info["instant"] == str(clustering):
            old = deltalake.DeltaTable(uri, version=version, storage_options=options)
            assert row_set(old.to_pyarrow_table(), columns) == row_set(
                table.read(as_of=str(clustering)), columns
            )
            break
    else:
        raise AssertionError("no version names the clustering")


def test_merge_on_read_table_on_s3_publishes_its_compacted_state(
    seaweed_s3: SeaweedS3, s3_settings: Settings, s3_bucket: str, tmp_path: Path
) -> None:
    uri = f"s3://{s3_bucket}/{tmp_path.name}/mor"
    table = Table.create(
        uri,
        name="mor",
        record_key="id",
        schema=SCHEMA,
        partition_by=["region"],
        ordering_field="ts",
        buckets=2,
        table_type="mor",
        publish_delta=True,
        settings=s3_settings,
        coordinator=EmbeddedCoordinator(),
    )
    ingest(table)
    compaction = table.schedule_compaction()
    assert compaction is not None
    table.run_table_service(compaction)
    table.clean(CleanPolicy(commits_retained=1, retention_window_s=0))
    options = storage_options(seaweed_s3)
    columns = SCHEMA.names
    delta = deltalake.DeltaTable(uri, storage_options=options)
    assert row_set(delta.to_pyarrow_table(), columns) == row_set(table.read(), columns)
    assert polars_rows(pl.scan_delta(uri, storage_options=options).collect(), columns) == row_set(
        table.read(), columns
    )
