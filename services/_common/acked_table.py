"""A faust table whose changelog writes an agent can wait for: ``await table.changelog_acked()``.

Why it exists (the cleaner lost table registrations this way): faust acknowledges a stream
event as soon as the agent takes the next one and commits the offset at the next commit, while
the changelog write of a table change made for that event is only buffered (``send_soon``).
faust does flush its producer before a commit, but that flush guarantees nothing:
``ProducerBuffer.flush_atmost`` returns after waiting 0.1 s for a send, and a message already
taken off the buffer but not yet handed to aiokafka (waiting for metadata, a loaded event loop)
counts as flushed, so aiokafka's own flush does not cover it either. An offset can therefore be
committed while the change it caused is not in the changelog; if the process dies then (kill
-9, OOM), the event is never delivered again and the change is lost for good: the partition's
next owner recovers a changelog without it.

An agent that awaits ``changelog_acked()`` before it takes its next event makes the change
durable first (the producer uses ``acks=all``): the offset cannot be committed earlier. A crash
while waiting leaves the offset uncommitted, so the next owner gets the event again (handlers
are idempotent).
"""

from __future__ import annotations

import asyncio
from typing import Any

import faust
from faust.types.tuples import FutureMessage

__all__ = ["AckedTable", "acked_table"]


class AckedTable(faust.Table[Any, Any]):
    """``faust.Table`` that remembers its changelog writes until the broker acknowledged them."""

    # Created lazily: faust builds tables through its own constructor chain.
    _unacked: set[FutureMessage] | None = None

    def send_changelog(
        self,
        partition: int | None,
        key: Any,
        value: Any,
        key_serializer: Any = None,
        value_serializer: Any = None,
    ) -> FutureMessage:
        future: FutureMessage = super().send_changelog(
            partition, key, value, key_serializer, value_serializer
        )
        if self._unacked is None:
            self._unacked = set()
        self._unacked.add(future)
        future.add_done_callback(self._forget_if_sent)
        return future

    def _forget_if_sent(self, future: FutureMessage) -> None:
        # A failed send stays, so the next ``changelog_acked`` raises its error.
        if self._unacked is not None and not future.cancelled() and future.exception() is None:
            self._unacked.discard(future)

    @property
    def unacked(self) -> int:
        """Changelog writes not acknowledged yet (or failed and not reported yet)."""
        return len(self._unacked or ())

    async def changelog_acked(self) -> None:
        """Return once every changelog write made so far is acknowledged by the broker.

        Raises:
            Exception: the producer's error for a write that failed (the change may be missing
                from the changelog; the caller must not consider it durable). It is raised once.
        """
        pending = list(self._unacked or ())
        if not pending:
            return
        try:
            await asyncio.gather(*pending)
        finally:
            for future in pending:
                if future.done() and self._unacked is not None:
                    self._unacked.discard(future)


def acked_table(app: faust.App, name: str, *, partitions: int, **options: Any) -> AckedTable:
    """Declare ``name`` on ``app`` as an ``AckedTable`` (what ``app.Table`` does for a plain
    one: same constructor arguments, registered in ``app.tables``)."""
    table = AckedTable(app, name=name, beacon=app.tables.beacon, partitions=partitions, **options)
    app.tables.add(table)
    return table
