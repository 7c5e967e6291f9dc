"""Fuzzing job-committer's handlers (issue 17): damaged ``job.requests`` and ``task.manifests``
messages (bit flips, truncation, another fingerprint, valid encodings with absurd values: empty
or 1 MB strings, NUL, ``..``, huge or negative numbers) are dead-lettered or refused, never a
``handler_error`` (the service failing on itself), and the handler keeps serving: the real
request of a pending job right after is committed.

The damage starts from a realistic request of a real pending job, so flips land in real
fields. The real-broker half ("the process keeps serving, /health OK") is
``tests/integration/job_committer``'s bad-request test.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _hypothesis_profiles import examples
from _jc_unit import make_table, open_job, rows
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_job_committer_handler import Harness, commit_request, encoded

from lakewarden.clients.commit import request_record
from lakewarden.events import make_event
from lakewarden.events.strategies import damaged_messages

pytestmark = pytest.mark.hypothesis


@pytest.fixture(scope="module")
def table_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("jc-fuzz")


def _after_damage_a_good_request_commits(h: Harness, table_dir: Path, n: int) -> None:
    job = open_job(make_table(str(table_dir / f"t{n}")), rows((1, "eu", "a")))
    h.results.clear()
    h.feed(encoded(commit_request(job)), key=job.table.table_id.encode())
    [(table_id, result)] = h.results
    assert (table_id, result.record["status"]) == (job.table.table_id, "committed")


_COUNTER = iter(range(10**9))


@settings(max_examples=examples(12), suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_damaged_commit_requests_are_dead_lettered_or_refused(
    data: st.DataObject, table_dir: Path
) -> None:
    n = next(_COUNTER)
    job = open_job(make_table(str(table_dir / f"d{n}")), rows((1, "eu", "a")))
    base = request_record(commit_request(job), "fuzz")
    value = data.draw(damaged_messages("JobCommitRequest", base))
    key = data.draw(st.sampled_from([job.table.table_id.encode(), b"", None]))
    h = Harness()
    h.feed(value, key=key)
    reasons = h.reasons()
    assert "handler_error" not in reasons, h.dlq.sent
    # dead-lettered, refused or answered: never silently dropped
    assert reasons or h.results, "the damaged request got no answer and no dead letter"
    _after_damage_a_good_request_commits(h, table_dir, n)


@settings(max_examples=examples(12), suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_damaged_task_manifests_are_dead_lettered_or_audited(
    data: st.DataObject, table_dir: Path
) -> None:
    n = next(_COUNTER)
    job = open_job(make_table(str(table_dir / f"m{n}")), rows((1, "eu", "a")))
    layout = job.committer.layout
    base = make_event(
        "TaskManifest",
        table_id=job.table.table_id,
        producer_id="fuzz",
        job_id=job.job_id,
        task_id=f"task_{job.job_id}_000000",
        task_attempt_id=job.accepted[0],
        instant=job.instant,
        manifest_path=layout.manifest_key(layout.attempt_id(0)),
        file_count=1,
        total_bytes=job.stats.write_stats[0].size_bytes,
        table_uri=job.table.uri,
    )
    h = Harness()
    h.feed(data.draw(damaged_messages("TaskManifest", base)), key=b"t", manifests=True)
    assert "handler_error" not in h.reasons(), h.dlq.sent
    h.feed(encoded(commit_request(job)), key=job.table.table_id.encode())
    assert [r.record["status"] for _, r in h.results] == ["committed"]
