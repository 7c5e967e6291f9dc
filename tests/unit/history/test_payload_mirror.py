"""The checker's msgspec mirrors never accept what pydantic refuses, and a ``requested``
payload as lakewarden publishes it is taken unread and found fast by the child.

``_validate``'s child decodes each payload text with its model's msgspec mirror
(``lakewarden.table._payload_mirror``) and runs pydantic only on the texts the mirror
refuses. That is pydantic's verdict only if every text a mirror accepts its model accepts,
to the same values: checked here on the lean fold's payload pools, the benchmark's payloads
and hypothesis' mutations of them (values replaced by any JSON value, keys dropped or
added, a key given twice). The fold's thread takes a ``requested`` payload that begins as
lakewarden publishes an ingestion's (``plain_ingestion``) unread: lakewarden's own never make
the checker fail the read.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from _hypothesis_profiles import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field, field_validator
from test_lean_fold import COMPLETED, INFLIGHT, PLAN_REQUESTED, REQUESTED, _sequential
from test_optimistic_fold import _assert_optimistic_same, _optimistic

from lakewarden.history._validate import fast_requested, plain_ingestion
from lakewarden.table._payload_mirror import MirrorError, mirror, payload_mirrors
from lakewarden.table.plans import JobPlan, MicroBatch, ServicePlan
from lakewarden.table.stats import CommitStats, WorkloadProfile
from lakewarden.table.timeline_state import RequestedPayload
from lakewarden.testing.payloads import file_group_payloads, streaming_requested

_MODELS: dict[str, type[BaseModel]] = {
    "requested": RequestedPayload,
    "inflight": WorkloadProfile,
    "completed": CommitStats,
}


_MIRRORS = payload_mirrors()
_DECODERS = {name: msgspec.json.Decoder(kind) for name, kind in _MIRRORS.items()}
_BENCH = [file_group_payloads(i, f"2025010100{i:07d}") for i in (0, 7, 123_456)]
_POOLS: dict[str, list[Any]] = {
    "requested": REQUESTED
    + PLAN_REQUESTED
    + [streaming_requested(i) for i in (0, 5, 10**9)]
    + [{"operation": "insert", "cancellable": False, "plan": None}],
    "inflight": INFLIGHT + [w for w, _ in _BENCH],
    "completed": COMPLETED
    + [c for _, c in _BENCH]
    + [
        CommitStats(
            operation="insert",
            job_id="job-1",
            batch=MicroBatch(query_id="q", batch_id=3),
            error_sources=("t@20240101000000000",),
            input_records=4,
            deleted_records=1,
        ).model_dump(mode="json"),
        # version 1: no version, the job id and batch as strings (pydantic reads it)
        {
            "operation": "insert",
            "write_stats": [],
            "extra_metadata": {
                "spark.job_id": "job-1",
                "spark.streaming.query_id": "q",
                "spark.streaming.batch_id": "3",
            },
        },
    ],
}


def _assert_mirror_sound(name: str, text: str) -> bool:
    """When the mirror accepts ``text``, pydantic accepts it with the same values; whether
    the mirror accepted it."""
    try:
        decoded = _DECODERS[name].decode(text)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return False
    model = _MODELS[name].model_validate_json(text)  # raises if the mirror was laxer
    assert json.loads(msgspec.json.encode(decoded)) == json.loads(model.model_dump_json()), text
    if name == "requested":
        assert fast_requested(decoded) == fast_requested(model), text
    return True


@pytest.mark.parametrize("name", list(_POOLS))
def test_the_mirrors_accept_the_valid_pool_payloads_with_pydantics_values(name: str) -> None:
    accepted = [_assert_mirror_sound(name, json.dumps(p, sort_keys=True)) for p in _POOLS[name]]
    assert sum(accepted) >= 3  # the mirror does the work for the usual payloads


_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.sampled_from([0, 1, -1, 1.0, 0.5, 2**63, 2**64, "", "1", "true", "job"])
    | st.floats(allow_nan=False)
    | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


@st.composite
def _mutated(draw: st.DrawFn) -> tuple[str, str]:
    """A pool payload with a few of its values replaced, keys dropped or added, as text,
    sometimes with a key given twice or a NaN."""
    name = draw(st.sampled_from(list(_POOLS)))
    payload = json.loads(json.dumps(draw(st.sampled_from(_POOLS[name]))))
    for _ in range(draw(st.integers(1, 3))):
        # a random dict inside the payload (the payload itself or a nested one)
        holders = [payload]
        stack = [payload]
        while stack:
            value = stack.pop()
            children = value.values() if isinstance(value, dict) else value
            for child in children:
                if isinstance(child, dict):
                    holders.append(child)
                if isinstance(child, dict | list):
                    stack.append(child)
        holder = draw(st.sampled_from(holders))
        keys = sorted(holder)
        action = draw(st.sampled_from(["replace", "drop", "add"] if keys else ["add"]))
        if action == "add":
            key = draw(
                st.sampled_from(
                    ["kind", "version", "extra", "job_id", "plan", "x", "extra_metadata", "batch"]
                )
            )
            holder[key] = draw(_JSON_VALUES)
        else:
            key = draw(st.sampled_from(keys))
            if action == "drop":
                del holder[key]
            else:
                holder[key] = draw(_JSON_VALUES)
    text = json.dumps(payload, sort_keys=draw(st.booleans()))
    tail = draw(st.sampled_from(["", "twice", "nan", "surrogate"]))
    if tail and text.endswith("}") and text != "{}":
        key = draw(st.sampled_from(["operation", "plan", "cancellable", "file_groups", "x"]))
        value = {"twice": json.dumps(draw(_JSON_VALUES)), "nan": "NaN", "surrogate": '"\\ud800"'}
        text = f'{text[:-1]}, "{key}": {value[tail]}}}'
    return name, text


@settings(max_examples=examples(600), suppress_health_check=[HealthCheck.too_slow])
@given(_mutated())
def test_what_a_mirror_accepts_pydantic_accepts_with_the_same_values(case: tuple[str, str]) -> None:
    _assert_mirror_sound(*case)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("requested", '{"operation": ""}'),  # min_length
        ("requested", '{"operation": "x", "zz": 1}'),  # extra="forbid"
        ("requested", '{"operation": "x", "plan": {"job_id": "j"}}'),  # legacy: no kind
        ("requested", '{"operation": "x", "plan": {"kind": "job", "job_id": ""}}'),
        ("requested", '{"operation": "x", "plan": {"kind": "job", "version": true}}'),
        ("requested", '{"operation": "x", "cancellable": 0}'),  # lax in pydantic only
        ("completed", '{"operation": "x", "failed_records": -1}'),  # ge=0
        ("completed", '{"operation": "x", "failed_records": 1.0}'),
        ("inflight", '{"operation": "x", "zz": NaN}'),
        ("inflight", '{"operation": "\\ud800"}'),
        ("inflight", '{"operation": "x", "operation": 5}'),
    ],
)
def test_the_mirrors_refuse_what_they_cannot_promise(name: str, text: str) -> None:
    """Each of these is refused by the mirror (pydantic decides it: valid or not)."""
    assert not _assert_mirror_sound(name, text)


def test_a_key_given_twice_is_the_last_one_in_both() -> None:
    assert _assert_mirror_sound("inflight", '{"operation": "x", "operation": "y"}')


class _Validated(BaseModel):
    name: str

    @field_validator("name")
    @classmethod
    def _upper(cls, value: str) -> str:
        return value.upper()


class _Patterned(BaseModel):
    name: str = Field(pattern="^a")


class _Floating(BaseModel):
    ratio: float


class _Allowing(BaseModel):
    model_config = {"extra": "allow"}
    name: str


@pytest.mark.parametrize("model", [_Validated, _Patterned, _Floating, _Allowing, ServicePlan])
def test_a_model_the_mirror_cannot_promise_for_is_refused(model: type[BaseModel]) -> None:
    """A change to a payload model that the mirror does not know fails when the mirrors are
    built (the child then cannot start its judges: caught here first)."""
    with pytest.raises(MirrorError):
        mirror(model)


def test_a_version_1_completed_payload_is_left_to_pydantic() -> None:
    """``CommitStats`` upgrades a payload without ``version``: its mirror requires the field
    (so it never reads such a text with other values than pydantic's), and a model validator
    is mirrored only with that promise."""
    old = {"operation": "insert", "extra_metadata": {"spark.job_id": "j"}}
    with pytest.raises(msgspec.ValidationError, match="version"):
        _DECODERS["completed"].decode(json.dumps(old))
    assert CommitStats.model_validate(old).job_id == "j"
    with pytest.raises(MirrorError, match="model validators"):
        mirror(CommitStats)


def test_the_mirrors_fields_are_the_models() -> None:
    for name, model in _MODELS.items():
        assert _MIRRORS[name].__struct_fields__ == tuple(model.model_fields)
    assert mirror(MicroBatch).__struct_fields__ == tuple(MicroBatch.model_fields)


# -- requested payloads taken unread ---------------------------------------------------------


_OPERATIONS = st.text(max_size=8) | st.sampled_from(["insert", "upsert", "bulk_insert"])


@st.composite
def _requested_payloads(draw: st.DrawFn) -> RequestedPayload:
    plan: Any = draw(
        st.none()
        | st.builds(
            JobPlan,
            job_id=st.none() | st.text(min_size=1, max_size=12),
            batch=st.none()
            | st.builds(
                MicroBatch,
                query_id=st.text(min_size=1, max_size=12),
                run_id=st.text(max_size=8),
                batch_id=st.integers(0, 2**40),
                checkpoint=st.text(max_size=12),
            ),
            sources=st.lists(st.text(max_size=8), max_size=2).map(tuple),
        )
    )
    operation = draw(_OPERATIONS.filter(bool))
    return RequestedPayload(operation=operation, cancellable=draw(st.booleans()), plan=plan)


@settings(max_examples=examples(300))
@given(_requested_payloads())
def test_a_published_ingestion_payload_is_taken_unread_and_found_fast(
    payload: RequestedPayload,
) -> None:
    """As lakewarden writes them (``json.dumps(..., sort_keys=True)``), an ingestion's
    requested payload that is not cancellable is laid out plain (``plain_ingestion``: the
    fold takes it unread) and is one the fast step takes (the checker finds it so): none
    costs a second read of the whole topic. A cancellable one is not (it is read in
    process)."""
    text = json.dumps(payload.model_dump(mode="json"), sort_keys=True)
    assert plain_ingestion(text) is not payload.cancellable
    if not payload.cancellable:
        assert fast_requested(payload)
        assert fast_requested(_DECODERS["requested"].decode(text))


def test_the_benchmarks_streaming_payloads_keep_the_verdict_clean() -> None:
    records = _sequential()
    for i, record in enumerate(records[::3]):
        record["payload"] = json.dumps(streaming_requested(i), sort_keys=True)
        assert plain_ingestion(record["payload"])
    _, invalid = _optimistic(records)
    assert invalid == []
    assert _assert_optimistic_same(records)
