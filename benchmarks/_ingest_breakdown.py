"""Where each micro-batch of an ingest benchmark's query went (``bench_ingest`` and
``_ingest_latency``). Its own module: ``bench_ingest`` runs as ``__main__`` in its child
process, where importing it by name again would register its benchmark twice."""

from __future__ import annotations

import statistics
from typing import Any

__all__ = ["breakdown", "p50s", "transitions"]


def transitions(uri: str) -> dict[str, dict[str, int]]:
    """Per instant, the wall time (ms) of each of its transitions."""
    from lakewarden.storage import open_storage
    from lakewarden.table.timeline import Timeline

    times: dict[str, dict[str, int]] = {}
    for entry in Timeline(open_storage(uri), table="orders").entries():
        times.setdefault(entry.instant, {})[str(entry.transition)] = entry.wall_time_ms
    return times


def breakdown(reports: list[Any], outcomes: list[Any], uri: str) -> dict[str, list[float]]:
    """Where each micro-batch's time went (ms), in order: ``trigger_to_call`` (Spark's planning
    and the Kafka fetch until ``foreachBatch`` is called), the writer's own steps
    (``MicroBatchWriter``'s stage clock: ``skip_check``, ``open`` = committer job set up + lock +
    ``requested``, ``plan``, ``heartbeat_start``, ``python_write`` (or ``spark_write`` and
    ``adopt`` with ``writer="spark"``), ``commit``), the commit split by the timeline's
    wall times (``commit_to_inflight``, ``inflight_to_completed`` = the job-committer's round
    trip and job commit, ``completed_to_return``), ``untimed`` (the call less its steps:
    heartbeat start/stop, the first batch's writer choice) and ``call_to_end`` (Spark's commit
    log and progress after the call)."""
    times = transitions(uri)
    by_batch = {o.batch_id: o for o in outcomes if not o.skipped}
    parts: dict[str, list[float]] = {}

    def add(name: str, value: float) -> None:
        parts.setdefault(name, []).append(value)

    for report in reports:
        outcome = by_batch.get(report.batch_id)
        if outcome is None or not report.started_ms:
            continue
        add("trigger_to_call", float(outcome.called_ms - report.started_ms))
        for stage in outcome.stages:
            add(stage.name, stage.duration_ms)
            if stage.name == "commit":
                marks = times.get(outcome.instant, {})
                start = outcome.called_ms + stage.start_ms
                end = start + stage.duration_ms
                if {"inflight", "completed"} <= set(marks):
                    add("commit_to_inflight", marks["inflight"] - start)
                    add("inflight_to_completed", float(marks["completed"] - marks["inflight"]))
                    add("completed_to_return", end - marks["completed"])
        add("untimed", outcome.total_ms - sum(s.duration_ms for s in outcome.stages))
        end_ms = report.started_ms + report.duration_ms
        add("call_to_end", end_ms - (outcome.called_ms + outcome.total_ms))
    return parts


def p50s(parts: dict[str, list[float]]) -> dict[str, float]:
    return {name: round(statistics.median(values), 1) for name, values in parts.items() if values}
