"""The data source on S3 (SeaweedFS): task attempts upload to final keys and hold back
completion; the job commit completes exactly the accepted attempts' uploads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _spark_helpers import SCHEMA, rows, sorted_rows, spark_df, spark_rows

import lakewarden.spark
from lakewarden.api.table import Table
from lakewarden.settings import Settings
from lakewarden.spark._options import encode_settings
from lakewarden.storage import open_storage
from lakewarden.table.instant import Transition

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_insert_upsert_read_on_s3_leaves_no_pending_upload(
    spark: Any, s3_settings: Settings, s3_bucket: str, tmp_path: Path
) -> None:
    uri = f"s3://{s3_bucket}/spark/{tmp_path.name}"
    table = Table.create(
        uri,
        name="orders",
        record_key="id",
        schema=SCHEMA,
        partition_by=["region"],
        ordering_field="ts",
        buckets=2,
        settings=s3_settings,
    )
    settings = encode_settings(s3_settings)
    writer = spark_df(spark, rows(range(60)), partitions=3).write.format("lakewarden")
    writer.mode("append").option("lakewarden.settings", settings).option(
        "lakewarden.test.fail_first_attempt_of_partition", "0"
    ).save(uri)
    lakewarden.spark.write(
        spark_df(spark, rows(range(50, 70), ts=2, note="v2")),
        uri,
        "upsert",
        settings=s3_settings,
    )

    expected = {r["id"]: r for r in sorted_rows(rows(range(60)))}
    expected.update({r["id"]: r for r in sorted_rows(rows(range(50, 70), ts=2, note="v2"))})
    back = spark.read.format("lakewarden").option("lakewarden.settings", settings).load(uri)
    assert spark_rows(back) == [expected[k] for k in sorted(expected)]
    assert [i.state for i in table.timeline()] == [Transition.COMPLETED] * 2
    storage = open_storage(uri, s3_settings)
    for partition in ("region=eu/", "region=us/"):
        assert list(storage.list_multipart_uploads(partition)) == []
    assert not [o.key for o in storage.list("") if o.key.startswith("_temporary/")]
