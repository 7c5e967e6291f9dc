"""Crash debris (issue 32, finding 6): temporary files a crashed write left (``.lw-tmp-*``,
which every listing skips) and stray names under ``.lakewarden/`` are found and deleted by the
clean once they are old enough, while everything lakewarden legitimately keeps there (the
config, every timeline entry, checkpoints, job summaries, claim marks) survives. On a local
directory and on S3 (SeaweedFS)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pytest

from lakewarden.settings import Settings
from lakewarden.storage import InvalidKeyError, is_temporary_key
from lakewarden.storage.local import LocalStorage
from lakewarden.table import Table
from lakewarden.table.checkpoint import checkpoint_key, entry_key
from lakewarden.table.clean.garbage import METADATA_LAYOUT
from lakewarden.table.timeline import Timeline
from lakewarden.testing import ManualClock

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
DAY = 24 * 3600.0

LEGITIMATE = (
    ".lakewarden/table.json",
    entry_key(0),
    checkpoint_key(2),
    ".lakewarden/jobs/20260101000000000-abc/_SUCCESS",
    ".lakewarden/claims/20260101000000000.json",
)
STRAYS = (
    # apache/hudi#19649: a half-written copy of a timeline file left by a failed write
    entry_key(1) + ".a5e022a6-e5c9-4450-b9e5-9296262329b5",
    ".lakewarden/timeline/00000000000000000007.json.tmp",
    checkpoint_key(9) + ".partial",
    ".lakewarden/claims/notes.txt",
)
UNKNOWN = ".lakewarden/newer-component/state.json"  # maybe a newer version's: orphan only


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def table(request: pytest.FixtureRequest, tmp_path: Path) -> Table:
    if request.param == "local":
        uri, settings = str(tmp_path / "t"), None
    else:
        settings = request.getfixturevalue("s3_settings")
        assert isinstance(settings, Settings)
        uri = f"s3://{request.getfixturevalue('s3_bucket')}/debris/{tmp_path.name}"
    made = Table.create(uri, name="t", record_key="id", schema=SCHEMA, settings=settings)
    for version in ("v0", "v1", "v2"):
        made.write(pa.Table.from_pylist([{"id": 1, "v": version}], schema=SCHEMA))
    assert made.timeline_log.checkpoints.write(made.state())  # checkpoint_key(2)
    return made


def put(table: Table, keys: tuple[str, ...]) -> None:
    for key in keys:
        if not table.storage.exists(key):
            table.storage.write(key, b"{}")


def later(days: float) -> ManualClock:
    return ManualClock(start=time.time() + days * DAY)


def test_the_layout_names_what_lakewarden_writes() -> None:
    assert all(METADATA_LAYOUT.fullmatch(key) for key in LEGITIMATE)
    assert not any(METADATA_LAYOUT.fullmatch(key) for key in (*STRAYS, UNKNOWN))


def test_hudi_19649_strays_under_lakewarden_break_nothing_and_are_cleaned(table: Table) -> None:
    put(table, LEGITIMATE + STRAYS + (UNKNOWN,))
    # Every operation still works beside them (Hudi parsed a leftover as a version, forever).
    fresh = Timeline(table.storage, table="t")
    assert fresh.load(full_replay=True).tail_seq == fresh.load().tail_seq == table.state().tail_seq
    assert set(table.read().column("v").to_pylist()) == {"v2"}
    table.write(pa.Table.from_pylist([{"id": 2, "v": "v3"}], schema=SCHEMA))
    young = table.clean(wall_clock=later(1).monotonic)  # younger than orphan_min_age_s
    assert not {f.path for f in young.files} & set(STRAYS)

    result = table.clean(wall_clock=later(4).monotonic)
    cleaned = {f.path for f in result.files}
    assert set(STRAYS) <= cleaned and result.instant is not None
    assert all("stray" in f.reason for f in result.files if f.path in STRAYS)
    assert UNKNOWN in {f.path for f in result.orphans} and UNKNOWN not in cleaned
    for key in STRAYS:
        assert not table.storage.exists(key)
    for key in (*LEGITIMATE, UNKNOWN):
        assert table.storage.exists(key), key
    assert set(table.read().column("v").to_pylist()) == {"v2", "v3"}
    assert table.state().rejected == ()


# -- temporary files (local: the one backend that writes through them) -----------------------


def crash_debris(root: Path) -> list[Path]:
    """Temporary files as a crash between writing and linking leaves them."""
    made = []
    for directory in (root, root / ".lakewarden/timeline", root / "_temporary/manifest_x/00"):
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / ".lw-tmp-0123456789abcdef"
        path.write_bytes(b"half a write")
        made.append(path)
    return made


def test_temporary_files_are_listed_by_nobody_but_list_temporary(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    storage.write("a/b.parquet", b"x")
    crash_debris(tmp_path)
    assert [i.key for i in storage.list("")] == ["a/b.parquet"]
    found = sorted(i.key for i in storage.list_temporary())
    assert found == [
        ".lakewarden/timeline/.lw-tmp-0123456789abcdef",
        ".lw-tmp-0123456789abcdef",
        "_temporary/manifest_x/00/.lw-tmp-0123456789abcdef",
    ]
    assert all(is_temporary_key(key) for key in found)
    storage.delete_temporary(found[0])
    storage.delete_temporary(found[0])  # idempotent
    assert len(list(storage.list_temporary())) == 2
    with pytest.raises(InvalidKeyError):
        storage.delete_temporary("a/b.parquet")  # only temporary files go this way
    assert storage.exists("a/b.parquet")


def test_clean_deletes_old_temporary_files_only(tmp_path: Path) -> None:
    table = Table.create(str(tmp_path / "t"), name="t", record_key="id", schema=SCHEMA)
    table.write(pa.Table.from_pylist([{"id": 1, "v": "v0"}], schema=SCHEMA))
    debris = crash_debris(tmp_path / "t")
    fresh = tmp_path / "t/.lw-tmp-fresh"
    fresh.write_bytes(b"a write in progress")
    clock = later(0)
    old_s = clock.monotonic() - 2 * DAY
    for path in debris:
        os.utime(path, (old_s, old_s))
    result = table.clean(wall_clock=clock.monotonic)
    assert sorted(f.path for f in result.files) == sorted(
        str(p.relative_to(tmp_path / "t")) for p in debris
    )
    assert all("temporary file of an interrupted write" in f.reason for f in result.files)
    assert result.files_deleted == 3 and not any(p.exists() for p in debris)
    assert fresh.exists()  # younger than temp_min_age_s: maybe a live write's
    assert table.read().column("v").to_pylist() == ["v0"]
