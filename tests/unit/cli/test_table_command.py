"""``lakewarden table create|show|timeline`` as a user runs them."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from click.testing import CliRunner

from lakewarden.api.table import Table
from lakewarden.cli import cli
from lakewarden.cli.table import payload_summary


def _run(*argv: str) -> str:
    result = CliRunner().invoke(cli, list(argv))
    assert result.exit_code == 0, result.output
    return result.stdout


def test_create_then_show_and_timeline(tmp_path: Path) -> None:
    uri = str(tmp_path / "orders")
    out = _run(
        "table", "create", uri, "--record-key", "id", "--column", "id:int64",
        "--column", "region:string", "--column", "ts:timestamp[us]",
        "--partition-by", "region", "--ordering-field", "ts", "--buckets", "2",
    )  # fmt: skip
    assert out.startswith("created table orders (")
    table = Table.open(uri)
    assert table.config.partition_by == ("region",) and table.config.buckets == 2
    assert not table.schema.field("id").nullable
    assert table.schema.field("ts").type == pa.timestamp("us")

    data = pa.table(
        {
            "id": pa.array([1, 2, 3], pa.int64()),
            "region": ["eu", "us", "eu"],
            "ts": pa.array([1, 2, 3], pa.timestamp("us")),
        },
        schema=table.schema,
    )
    first = table.write(data, operation="insert")
    table.write(data.slice(0, 1), operation="upsert")

    shown = _run("table", "show", uri)
    assert "record key id" in shown and "partitions region" in shown
    assert "  id: int64 not null" in shown and "  ts: timestamp[us]" in shown
    assert "3 rows" in shown and "2 partitions" in shown
    assert f"{first.instant}  commit  completed  insert  2 files, 3 records" in shown

    lines = _run("table", "timeline", uri).splitlines()
    assert len(lines) == 6  # requested, inflight, completed per write
    assert [line.split()[3] for line in lines] == ["requested", "inflight", "completed"] * 2
    assert lines[0].split()[1] == first.instant


def test_payload_summary_is_generic() -> None:
    payload = {
        "operation": "compaction",
        "cancellable": True,
        "plan": {"kind": "service"},
        "file_groups": [1, 2],
        "reason": "",
        "x": None,
    }
    assert payload_summary(payload) == (
        "operation=compaction cancellable=True plan={service} file_groups=[2]"
    )
    assert payload_summary({"reason": "r" * 300}).endswith("...")


def test_create_at_format_version_1(tmp_path: Path) -> None:
    uri = str(tmp_path / "legacy")
    _run("table", "create", uri, "--record-key", "id", "--column", "id:int64",
         "--format-version", "1")  # fmt: skip
    assert Table.open(uri).config.format_version == 1
    assert "format version 1" in _run("table", "show", uri)
    refused = CliRunner().invoke(
        cli, ["table", "create", str(tmp_path / "t"), "--record-key", "id", "--column",
              "id:int64", "--format-version", "3"]
    )  # fmt: skip
    assert refused.exit_code == 2 and "format-version" in refused.output
