"""A streaming query's new progress updates, read at the cost of the new ones only.

``StreamingQuery.recentProgress`` converts every update Spark keeps (up to
``spark.sql.streaming.numRecentProgressUpdates``, 100 by default) from its JVM object, field by
field over Py4J: a few hundred round trips per update, so polling it twice a second costs the
driver's Python (and the JVM serving it) a sizeable share of a core while the query runs, in
competition with the query's own tasks. ``ProgressReader.new()`` walks the JVM's list from its
newest update back to the last one it returned and converts only those in between, each from
its JSON (one round trip): a poll with nothing new costs three round trips.

A query without a JVM handle (Spark Connect, tests) is read through ``recentProgress``.
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql.streaming.listener import StreamingQueryProgress

__all__ = ["ProgressReader"]

# What identifies one update: a trigger of a run (an idle trigger repeats the batch id of the
# batch to come, with a timestamp of its own).
_Mark = tuple[str, str, int]


def _mark(progress: Any) -> _Mark:
    return (str(progress.runId), str(progress.timestamp), int(progress.batchId))


class ProgressReader:
    """The updates of ``query`` that ``new()`` has not returned yet, oldest first."""

    def __init__(self, query: Any) -> None:
        self._query = query
        self._newest: _Mark | None = None

    def new(self) -> list[Any]:
        """The updates since the last call (all that Spark keeps on the first)."""
        jquery = getattr(self._query, "_jsq", None)
        if jquery is None:
            updates = list(self._query.recentProgress)
            marks = [_mark(p) for p in updates]
            start = marks.index(self._newest) + 1 if self._newest in marks else 0
            found = updates[start:]
        else:
            found = self._from_jvm(jquery.recentProgress())
        if found:
            self._newest = _mark(found[-1])
        return found

    def _from_jvm(self, recent: Any) -> list[Any]:
        found: list[Any] = []
        for index in range(len(recent) - 1, -1, -1):
            progress = StreamingQueryProgress.fromJson(json.loads(recent[index].json()))
            if _mark(progress) == self._newest:
                break
            found.append(progress)
        found.reverse()
        return found
