"""job-committer's agents, declared at module top.

- ``serve_commit_requests`` (concurrency 1): every ``JobCommitRequest`` through
  ``RequestHandler`` (idempotent: a redelivered request resumes, a duplicate gets the
  recorded result);
- ``audit_task_manifests`` (concurrency 1): every ``TaskManifest`` through ``ManifestHandler``,
  which holds the manifests the events carry for the job commits (``held``).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

import faust

from lakewarden.events import Event
from lakewarden.table import Coordinator, connect
from lakewarden_services.job_committer.app import (
    SERVICE,
    app,
    commit_pool,
    dead_letters,
    manifest_pool,
    manifests_topic,
    requests_topic,
    results_topic,
    settings,
    timeline_topic,
)
from lakewarden_services.job_committer.handler import ManifestHandler, RequestHandler
from lakewarden_services.job_committer.held import HeldManifests, HeldManifestSettings
from lakewarden_services.job_committer.worker import CommitWorker


def _on(pool: Executor) -> Callable[[Callable[[], Any]], Any]:
    async def run(func: Callable[[], Any]) -> Any:
        return await asyncio.get_running_loop().run_in_executor(pool, func)

    return run


async def _send_result(table_id: str, event: Event) -> None:
    await results_topic.send(key=table_id.encode(), value=event)


async def _send_transition(table_id: str, event: Event) -> None:
    await timeline_topic.send(key=table_id.encode(), value=event)


@functools.cache
def _coordinator() -> Coordinator:
    # The table lock is timeline-lock's lease: Kafka or refuse (no embedded fallback). Built
    # on the first commit, on the worker thread: no network IO at import.
    return connect(settings, require_kafka=True).coordinator


worker = CommitWorker(settings, _coordinator)
held_settings = HeldManifestSettings()
held = HeldManifests(
    max_bytes=held_settings.held_manifest_bytes, max_age_s=held_settings.held_manifest_age_s
)
requests_handler = RequestHandler(
    worker=worker,
    run_blocking=_on(commit_pool),
    send_result=_send_result,
    send_transition=_send_transition,
    dead_letters=dead_letters,
    producer_id=SERVICE,
    held=held,
    manifest_wait_s=held_settings.manifest_wait_s,
)
manifests_handler = ManifestHandler(
    settings=settings, run_blocking=_on(manifest_pool), dead_letters=dead_letters, held=held
)


@app.agent(requests_topic, concurrency=1)
async def serve_commit_requests(stream: faust.StreamT[Any]) -> None:
    """Commit every requested job and answer it."""
    async for event in stream.events():
        await requests_handler.handle(event.message, event.value)


@app.agent(manifests_topic, concurrency=1)
async def audit_task_manifests(stream: faust.StreamT[Any]) -> None:
    """Record and check every announced task manifest."""
    async for event in stream.events():
        await manifests_handler.handle(event.message, event.value)
