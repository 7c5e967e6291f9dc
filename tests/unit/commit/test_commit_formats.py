"""Ids, layout, manifest and summary formats, statistics and the parallel helper (no store)."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from lakewarden.commit import (
    FileEntry,
    InvalidIdError,
    JobLayout,
    MalformedManifestError,
    TaskAttemptId,
    TaskId,
    UploadRef,
    new_job_id,
)
from lakewarden.commit.layout import attempt_file_name, destination_of
from lakewarden.commit.manifest import (
    MANIFEST_TYPE,
    ManifestHeader,
    directories_of,
    parse_manifest,
    parse_manifest_rows,
    serialize_manifest,
)
from lakewarden.commit.stages import run_parallel
from lakewarden.commit.stages.commit_files import leaf_directories
from lakewarden.commit.statistics import CommitStatistics
from lakewarden.commit.success import SUCCESS_NAME, SuccessData, build_summary
from lakewarden.storage import InvalidKeyError
from lakewarden.storage._keys import check_key

job_ids = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9-]{0,40}", fullmatch=True)


@given(job_ids, st.integers(0, 10**7), st.integers(0, 10**4))
def test_task_and_attempt_ids_round_trip(job_id: str, task: int, attempt: int) -> None:
    attempt_id = TaskAttemptId.of(job_id, task, attempt)
    assert TaskAttemptId.parse(str(attempt_id)) == attempt_id
    assert TaskId.parse(str(attempt_id.task_id)) == attempt_id.task_id
    assert attempt_id.job_id == job_id


def test_ids_follow_hadoop_shape_and_derive_from_the_job() -> None:
    attempt = TaskAttemptId.of("job-1", 12, 3)
    assert str(attempt.task_id) == "task_job-1_000012"
    assert str(attempt) == "attempt_job-1_000012_3"
    assert new_job_id() != new_job_id()
    assert new_job_id("20250101000000000").startswith("20250101000000000-")


@pytest.mark.parametrize("bad", ["", "a_b", "a/b", "-a", "a" * 129, "a b"])
def test_invalid_job_ids_are_refused(bad: str) -> None:
    with pytest.raises(InvalidIdError):
        JobLayout(bad)


def test_layout_keys() -> None:
    layout = JobLayout("j1", 2)
    attempt = layout.attempt_id(5, 1)
    assert layout.job_dir == "_temporary/manifest_j1/"
    assert layout.attempt_dir == "_temporary/manifest_j1/02/"
    assert (
        layout.task_attempt_dir(attempt) == "_temporary/manifest_j1/02/tasks/attempt_j1_000005_1/"
    )
    assert (
        layout.manifest_key(attempt)
        == "_temporary/manifest_j1/02/manifests/attempt_j1_000005_1-manifest.json"
    )
    assert layout.summary_key == ".lakewarden/jobs/j1/_SUCCESS"
    with pytest.raises(InvalidIdError, match="belongs to job"):
        layout.check_attempt("attempt_j2_000005_1")


def _header(files: list[FileEntry]) -> ManifestHeader:
    return ManifestHeader(
        job_id="j1",
        job_attempt_number=0,
        task_id="task_j1_000000",
        task_attempt_id="attempt_j1_000000_0",
        task_attempt_dir="_temporary/manifest_j1/00/tasks/attempt_j1_000000_0/",
        directories=directories_of(files),
        extra_data={"k": "v"},
    )


entries = st.lists(
    st.builds(
        FileEntry,
        st.text(min_size=1, max_size=20),
        st.text(min_size=1, max_size=20),
        st.integers(0, 2**40),
        st.none() | st.text(max_size=10),
        st.none()
        | st.builds(
            UploadRef,
            st.text(min_size=1, max_size=5),
            st.text(min_size=1, max_size=20),
            st.text(min_size=1, max_size=20),
            st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=3),
            st.integers(0, 2**40),
        ),
    ),
    max_size=20,
)


@given(entries)
def test_manifest_round_trips(files: list[FileEntry]) -> None:
    data = serialize_manifest(_header(files), files)
    header, parsed = parse_manifest(data, key="m")
    assert header == _header(files)
    assert parsed == files
    _, rows = parse_manifest_rows(data, key="m")
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [
        (f.src, f.dst, f.size, f.upload) for f in files
    ]


@pytest.mark.parametrize(
    "change, message",
    [
        ({"type": "x/1"}, "expected"),
        ({"version": 2}, "expected"),
        ({"files": "nope"}, "no 'files' list"),
        ({"files": [{"s": "a", "d": "b", "z": -1}]}, "size -1"),
        ({"files": [{"s": "a", "d": "b", "z": True}]}, "size True"),
        ({"files": [{"s": "", "d": "b", "z": 1}]}, "non-empty string"),
        ({"files": [{"s": "a", "d": "b", "z": 1, "e": 5}]}, "non-string etag"),
        ({"files": [{"s": "a", "d": "b", "z": 1, "u": {"bucket": "b"}}]}, "upload needs"),
        ({"files": [7]}, "is not an object"),
        ({"jobId": None}, "bad header"),
    ],
)
def test_malformed_manifests_are_named(change: dict[str, object], message: str) -> None:
    doc = json.loads(serialize_manifest(_header([]), []))
    doc.update(change)
    data = json.dumps(doc).encode()
    for parse in (parse_manifest, parse_manifest_rows):
        with pytest.raises(MalformedManifestError, match=message) as info:
            parse(data, key="manifests/x-manifest.json")
        assert info.value.path == "manifests/x-manifest.json"


def test_manifest_type_is_hadoops() -> None:
    assert MANIFEST_TYPE.startswith("org.apache.hadoop.mapreduce.lib.output.committer.manifest")


def test_summary_round_trips_and_caps_filenames() -> None:
    committed = {"a": [(f"p=0/f{i}.parquet", i) for i in range(150)]}
    summary = build_summary(
        job_id="j1",
        state="COMMITTED",
        stage=None,
        committed=committed,
        iostatistics=CommitStatistics().snapshot(),
        diagnostics={},
    )
    assert summary.success and len(summary.filenames) == 100
    assert summary.metrics == {"files": 150, "bytes": sum(range(150))}
    again = SuccessData.from_bytes(summary.to_bytes(), key="_SUCCESS")
    assert again == summary and again.name == SUCCESS_NAME
    assert "committedFiles" in json.loads(summary.to_bytes())


def test_statistics_have_the_hadoop_shape() -> None:
    stats = CommitStatistics()
    stats.record("op_rename", 0.002)
    stats.record("op_rename", 0.004, failed=True)
    stats.record("op_stat", 0.010, samples=10)
    snap = stats.snapshot()
    assert snap["counters"] == {"op_rename": 2, "op_rename.failures": 1, "op_stat": 10}
    assert snap["minimums"]["op_rename.min"] == 2.0
    assert snap["maximums"]["op_rename.max"] == 4.0
    assert snap["meanstatistics"]["op_stat.mean"] == {"samples": 10, "sum": 10.0}


def test_leaf_directories() -> None:
    dirs = frozenset({"a", "a/b", "a/b/c", "a/bc", "d", "e/f"})
    assert leaf_directories(dirs) == ["a/b/c", "a/bc", "d", "e/f"]


def test_run_parallel_keeps_order_and_stops_on_the_first_failure() -> None:
    started: list[int] = []
    lock = threading.Lock()

    def work(item: int, stop: threading.Event) -> int:
        with lock:
            started.append(item)
        if item == 3:
            raise ValueError("boom")
        if item > 3:  # busy until the failure stops the run: nothing queued may start then
            stop.wait(5)
        return item * 2

    with ThreadPoolExecutor(2) as pool:
        assert run_parallel(pool, range(10), lambda i, s: i * 2, max_in_flight=4) == [
            i * 2 for i in range(10)
        ]
        with pytest.raises(ValueError, match="boom"):
            run_parallel(pool, range(100), work, max_in_flight=4)
    assert len(started) < 20  # the rest never started
    assert run_parallel(None, [1, 2], lambda i, s: i + 1, max_in_flight=1) == [2, 3]


keys = st.lists(
    st.text(st.characters(blacklist_characters="/\x00\\"), min_size=1, max_size=90).filter(
        lambda s: s not in (".", "..")
    ),
    min_size=1,
    max_size=4,
).map("/".join)


def _is_valid_key(key: str) -> bool:
    try:
        check_key(key)
    except InvalidKeyError:
        return False
    return True


# Found by hypothesis in a CI run: a lone surrogate raised a raw UnicodeEncodeError.
@example("\ud800")
@example("p=1/\udcff.parquet")  # a surrogate the filesystem encoding would have let through
@given(keys)
def test_attempt_file_names_round_trip(dest_key: str) -> None:
    if not _is_valid_key(dest_key):  # refused with the named error, never a raw one
        with pytest.raises(InvalidKeyError, match="invalid key"):
            attempt_file_name(dest_key)
        return
    name = attempt_file_name(dest_key)
    assert destination_of(name) == dest_key
    flat = dest_key.replace("%", "%25").replace("/", "%2F")
    if len(flat.encode()) <= 240:
        assert name == flat  # flat: one directory per attempt
    else:
        assert name.count("/") == dest_key.count("/")  # too long for one name: a tree


def test_attempt_file_names_are_flat_and_readable() -> None:
    assert attempt_file_name("p=1/q=%2F/f.parquet") == "p=1%2Fq=%252F%2Ff.parquet"
    assert destination_of("p=1%2Fq=%252F%2Ff.parquet") == "p=1/q=%2F/f.parquet"
