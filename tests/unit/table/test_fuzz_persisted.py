"""Mutated persisted JSON (issue 17, fuzzing): ``table.json``, task manifests, ``_SUCCESS`` and
timeline entries, damaged byte-wise (bit flips, truncation, a replaced byte) or value-wise (a
field replaced by an absurd value of another type: huge or negative numbers, 1 MB strings,
null, nesting). Each parser returns a value or raises its *named* error (a ``LakewardenError``),
never anything else; a timeline with a damaged entry loads deterministically (the entry is
read or rejected the same way by every reader, a full replay included).

(Checkpoints have their own property in ``table/test_checkpoint_digest.py``: a mutated one is
never used unless it is still right.) ``make fuzz`` runs these with 20x the examples.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest
from _hypothesis_profiles import examples
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lakewarden.commit.manifest import (
    FileEntry,
    ManifestHeader,
    directories_of,
    parse_manifest,
    parse_manifest_rows,
    serialize_manifest,
)
from lakewarden.commit.success import SuccessData, build_summary
from lakewarden.errors import LakewardenError
from lakewarden.table.checkpoint import entry_key
from lakewarden.table.config import TableConfig, parse_config
from lakewarden.table.instant import Action, Transition
from lakewarden.table.timeline import EntryDraft, Timeline

pytestmark = pytest.mark.hypothesis

ABSURD: list[Any] = [
    None,
    -1,
    2**63,
    -(2**70),
    1e308,
    "",
    "x" * 1_000_000,
    "../../etc/passwd",
    "/abs/path",
    "a\x00b",
    "99999999999999999",
    [],
    {},
    [[[[[]]]]],
    True,
]


@st.composite
def mutated(draw: st.DrawFn, original: bytes) -> bytes:
    """``original`` damaged once: a byte-level or a value-level mutation."""
    kind = draw(st.sampled_from(["flip", "truncate", "byte", "value", "drop"]))
    if kind in ("value", "drop"):
        doc = json.loads(original)
        paths = list(_paths(doc))
        path = draw(st.sampled_from(paths))
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        if kind == "drop" and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(st.sampled_from(ABSURD))
        return json.dumps(doc).encode()
    raw = bytearray(original)
    at = draw(st.integers(0, len(raw) - 1))
    if kind == "flip":
        raw[at] ^= 1 << draw(st.integers(0, 7))
    elif kind == "truncate":
        del raw[at:]
    else:
        raw[at] = draw(st.integers(0, 255))
    return bytes(raw)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> Any:
    items = (
        doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else []
    )
    for key, value in items:
        yield (*prefix, key)
        yield from _paths(value, (*prefix, key))


def _only_named_errors(parse: Any, data: bytes) -> None:
    try:
        parse(data)
    except LakewardenError:
        pass  # the named error: what a caller handles


TABLE_JSON = (
    TableConfig.new(
        name="orders",
        record_key="id",
        schema=pa.schema([("id", pa.int64()), ("p", pa.string()), ("ts", pa.int64())]),
        partition_by=["p"],
        ordering_field="ts",
        buckets=4,
    )
    .model_dump_json()
    .encode()
)

DAMAGED_FLATBUFFER = json.dumps(
    {
        **json.loads(TABLE_JSON),
        "arrow_schema": "/////9gAAAAQAAAAAAAKAAwABgAFAAgACgAAAAABBAAMAAAACAAIAACABAAIAAAABAAAA"
        "AMAAABwAAAANAAAAAQAAACs////AAABAhAAAAAUAAAABAAAAAAAAAACAAAAdHMAAJz///8AAAABQAAAANj///8AAAE"
        "FEAAAABgAAAAEAAAAAAAAAAEAAABwAAAABAAEAAQAAAAQABQACAAGAAcADAAAABAAEAAAAAAAAQIQAAAAHAAA"
        "AAQAAAAAAAAAAgAAAGlkAAAIAAwACAAHAAgAAAAAAAABQAAAAAAAAAA=",
    }
).encode()

FILES = [FileEntry("tasks/a/p=1/f.parquet", "p=1/f.parquet", 10, None, None)]
MANIFEST = serialize_manifest(
    ManifestHeader(
        job_id="j1",
        job_attempt_number=0,
        task_id="task_j1_000000",
        task_attempt_id="attempt_j1_000000_0",
        task_attempt_dir="_temporary/manifest_j1/00/tasks/attempt_j1_000000_0/",
        directories=directories_of(FILES),
        extra_data={"k": "v"},
    ),
    FILES,
)


@settings(max_examples=examples(150), suppress_health_check=[HealthCheck.too_slow])
@given(data=mutated(TABLE_JSON))
@example(data=DAMAGED_FLATBUFFER)  # found by this test: a raw OSError from pyarrow
def test_mutated_table_json_parses_or_is_a_named_error(data: bytes) -> None:
    _only_named_errors(lambda d: parse_config(d, location="t/"), data)


@settings(max_examples=examples(150), suppress_health_check=[HealthCheck.too_slow])
@given(data=mutated(MANIFEST))
def test_mutated_manifest_parses_or_is_a_named_error(data: bytes) -> None:
    _only_named_errors(lambda d: parse_manifest(d, key="m"), data)
    _only_named_errors(lambda d: parse_manifest_rows(d, key="m"), data)


SUCCESS = build_summary(
    job_id="j1",
    state="COMMITTED",
    stage=None,
    committed={"p=1": [("f.parquet", 10)]},
    iostatistics={},
    diagnostics={},
).to_bytes()


@settings(max_examples=examples(150), suppress_health_check=[HealthCheck.too_slow])
@given(data=mutated(SUCCESS))
def test_mutated_success_summary_parses_or_is_a_named_error(data: bytes) -> None:
    _only_named_errors(lambda d: SuccessData.from_bytes(d, key="_SUCCESS"), data)


def _draft(instant: str, transition: Transition, payload: dict[str, Any]) -> EntryDraft:
    return EntryDraft(
        instant=instant,
        action=Action.COMMIT,
        transition=transition,
        actor="w",
        lock_token=None,
        wall_time_ms=0,
        payload=payload,
    )


def _log() -> dict[str, bytes]:
    """A small log (two instants: one completed, one inflight) as key -> bytes."""
    from _memstore import MemStorage

    storage = MemStorage()
    timeline = Timeline(storage)
    first, second = "20240101000000000", "20240101000000001"
    requested = {"operation": "insert", "cancellable": False, "plan": None}
    timeline.append(_draft(first, Transition.REQUESTED, requested))
    timeline.append(_draft(second, Transition.REQUESTED, requested))
    timeline.append(_draft(first, Transition.INFLIGHT, {"operation": "insert"}))
    timeline.append(_draft(second, Transition.INFLIGHT, {"operation": "insert"}))
    timeline.append(_draft(first, Transition.COMPLETED, {"operation": "insert"}))
    return {key: storage.read(key) for key in (info.key for info in storage.list(""))}


LOG = _log()


@settings(max_examples=examples(100), suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_timeline_entry_loads_deterministically(data: st.DataObject) -> None:
    from _memstore import MemStorage

    seq = data.draw(st.integers(0, 4))
    storage = MemStorage()
    for key, value in LOG.items():
        storage.write(key, value)
    storage.write(entry_key(seq), data.draw(mutated(LOG[entry_key(seq)])))
    try:
        state = Timeline(storage).load()
    except LakewardenError:
        return
    assert state == Timeline(storage).load() == Timeline(storage).load(full_replay=True)
    assert state.tail_seq == 4  # the damaged entry is read or rejected, never the end


def test_a_manifest_over_the_size_limit_is_a_named_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from lakewarden.commit import manifest
    from lakewarden.commit.errors import MalformedManifestError

    monkeypatch.setattr(manifest, "MAX_MANIFEST_BYTES", len(MANIFEST) - 1)
    for parse in (parse_manifest, parse_manifest_rows):
        with pytest.raises(MalformedManifestError, match="the limit is") as err:
            parse(MANIFEST, key="m")
        assert "Help:" in str(err.value)
    monkeypatch.setattr(manifest, "MAX_MANIFEST_BYTES", len(MANIFEST))
    assert parse_manifest(MANIFEST, key="m")[1][0].dst == "p=1/f.parquet"
