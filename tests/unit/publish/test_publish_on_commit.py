"""``LAKEWARDEN_PUBLISH_ON_COMMIT=false``: a writer's commits leave publishing to the publisher
service (or ``sync``); the log then catches up to the same versions."""

from __future__ import annotations

from pathlib import Path

import pytest
from delta_checks import assert_latest_matches, log_versions
from test_delta_readers import SCHEMA, rows

from lakewarden.api.table import Table
from lakewarden.publish import DeltaPublisher
from lakewarden.table.timeline import Timeline


@pytest.mark.parametrize("value", ["false", "0", "off"])
def test_a_writer_told_not_to_publish_leaves_it_to_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("LAKEWARDEN_PUBLISH_ON_COMMIT", value)
    root = tmp_path / "t"
    table = Table.create(
        str(root),
        name="t",
        record_key="id",
        schema=SCHEMA,
        partition_by=["region"],
        publish_delta=True,
    )
    for i in range(3):
        table.write(rows((i, "eu", 1, f"v{i}")))
    assert log_versions(root) == [0]  # version 0 is the create's, not a commit's
    DeltaPublisher(table.storage, table.config, Timeline(table.storage)).sync()
    assert log_versions(root) == [0, 1, 2, 3]
    assert_latest_matches(table, root)


def test_writers_publish_on_commit_by_default(tmp_path: Path) -> None:
    root = tmp_path / "t"
    table = Table.create(str(root), name="t", record_key="id", schema=SCHEMA, publish_delta=True)
    table.write(rows((1, "eu", 1, "a")))
    assert log_versions(root) == [0, 1]
