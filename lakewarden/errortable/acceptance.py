"""The sink's pure logic: buffer failed records per (table, instant), decide from storage
what the main instant accepted, and say which Kafka offsets are safe to commit.

1. ``add``: a record is buffered under its ``SourceKey`` (table id, instant), deduplicated by
   uid (redelivery), remembering the lowest offset per partition each key holds;
2. ``decide``: once storage says how the instant ended (``outcome_of``), the key is
   ``Accepted`` with the attempts the job commit accepted, or ``Discarded`` (rolled back,
   aborted); a discarded key's records are dropped at once;
3. ``ready``: an accepted key is ready when the consumer has read every partition of it up to
   the high watermark taken *after* the instant was seen completed. Tasks flush their records
   before their task commit, so every record of an accepted attempt is below that watermark:
   none can arrive after the key is committed;
4. ``finish``: after the error-table commit (or when nothing was accepted); later records of a
   finished key (zombie attempts) are dropped;
5. ``committable_offsets``: per partition, the lowest offset still buffered, else the
   position: a crash redelivers every record whose key is not finished, never fewer.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from lakewarden.commit import SuccessData
from lakewarden.errortable.records import ErrorRow
from lakewarden.table.instant import Transition
from lakewarden.table.timeline_state import InstantState


@dataclass(frozen=True, slots=True, order=True)
class SourceKey:
    """One main instant: the idempotence key of its errors in the error table."""

    table_id: str
    instant: str

    def __str__(self) -> str:
        return f"{self.table_id}@{self.instant}"

    @classmethod
    def parse(cls, text: str) -> SourceKey:
        table_id, _, instant = text.rpartition("@")
        return cls(table_id, instant)


@dataclass(frozen=True, slots=True)
class Pending:
    """The instant has not ended (or is not on the timeline yet)."""

    reason: str = ""


@dataclass(frozen=True, slots=True)
class Accepted:
    """The instant completed; its job commit accepted ``attempts``."""

    job_id: str
    attempts: frozenset[str]


@dataclass(frozen=True, slots=True)
class Discarded:
    """The instant will never complete, or its accepted attempts cannot be known."""

    reason: str


Outcome = Pending | Accepted | Discarded


def job_id_of(state: InstantState) -> str | None:
    """The committer job of a Spark write: named by its completion, else by its plan."""
    if state.commit is not None and state.commit.job_id is not None:
        return state.commit.job_id
    plan = state.job_plan
    return plan.job_id if plan is not None else None


def outcome_of(
    state: InstantState | None, summary_of: Callable[[str], SuccessData | None]
) -> Outcome:
    """How the main instant ended, from storage: its timeline state and, when completed, the
    ``_SUCCESS`` summary of its job (whose ``committedFiles`` has one key per accepted
    attempt, also for attempts that wrote no file)."""
    if state is None:
        return Pending("not on the timeline")
    if state.state in (Transition.ROLLED_BACK, Transition.ABORTED):
        return Discarded(f"instant {state.instant} was {state.state.value}")
    if state.state is not Transition.COMPLETED:
        return Pending(f"instant {state.instant} is {state.state.value}")
    job_id = job_id_of(state)
    if job_id is None:
        return Discarded(f"completed instant {state.instant} names no committer job")
    summary = summary_of(job_id)
    if summary is None or summary.state != "COMMITTED":
        found = "no _SUCCESS summary" if summary is None else f"job state {summary.state}"
        return Discarded(f"completed instant {state.instant}: {found} for job {job_id}")
    return Accepted(job_id, frozenset(summary.committed_files))


@dataclass
class _Entry:
    rows: dict[str, ErrorRow] = field(default_factory=dict)
    first_offsets: dict[int, int] = field(default_factory=dict)
    outcome: Outcome = field(default_factory=Pending)
    watermarks: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ReadyErrors:
    """An accepted key's records: ``rows`` of accepted attempts; ``dropped`` the others."""

    key: SourceKey
    sample: ErrorRow  # where the table is (uri, name): any row of the key
    rows: tuple[ErrorRow, ...]
    dropped: int


class ErrorBuffer:
    """The buffers of the keys this sink instance holds (see the module doc)."""

    def __init__(self, *, remember_finished: int = 100_000) -> None:
        self._entries: dict[SourceKey, _Entry] = {}
        self._positions: dict[int, int] = {}
        self._finished: OrderedDict[SourceKey, None] = OrderedDict()
        self._remember = remember_finished

    def __len__(self) -> int:
        return sum(len(e.rows) for e in self._entries.values())

    def add(self, row: ErrorRow, partition: int, offset: int) -> bool:
        """Buffer ``row``; False when its key is finished (the caller counts it dropped)."""
        self.consumed(partition, offset)
        key = SourceKey(row.table_id, row.instant)
        if key in self._finished:
            return False
        entry = self._entries.setdefault(key, _Entry())
        entry.rows.setdefault(row.uid, row)
        first = entry.first_offsets.get(partition)
        if first is None or offset < first:
            entry.first_offsets[partition] = offset
        return True

    def consumed(self, partition: int, offset: int) -> None:
        """Message ``offset`` of ``partition`` was handled (buffered, dropped, dead-lettered)."""
        self._positions[partition] = max(self._positions.get(partition, 0), offset + 1)

    def keys(self, *, pending_only: bool = True) -> list[SourceKey]:
        return sorted(
            k
            for k, e in self._entries.items()
            if not pending_only or isinstance(e.outcome, Pending)
        )

    def sample(self, key: SourceKey) -> ErrorRow:
        return next(iter(self._entries[key].rows.values()))

    def partitions(self, key: SourceKey) -> list[int]:
        return sorted(self._entries[key].first_offsets)

    def decide(self, key: SourceKey, outcome: Outcome, watermarks: dict[int, int]) -> int:
        """Record the instant's outcome (``watermarks``: the high watermarks of the key's
        partitions, taken after the outcome was read). Returns the records dropped now."""
        entry = self._entries.get(key)
        if entry is None or isinstance(outcome, Pending):
            return 0
        if isinstance(outcome, Discarded):
            dropped = len(entry.rows)
            self.finish([key])
            return dropped
        entry.outcome, entry.watermarks = outcome, dict(watermarks)
        return 0

    def ready(self) -> list[ReadyErrors]:
        """The accepted keys read up to their watermarks, split into accepted and dropped."""
        out = []
        for key in sorted(self._entries):
            entry = self._entries[key]
            if not isinstance(entry.outcome, Accepted):
                continue
            if any(self._positions.get(p, 0) < w for p, w in entry.watermarks.items()):
                continue
            rows = tuple(r for r in entry.rows.values() if r.task_attempt in entry.outcome.attempts)
            sample = next(iter(entry.rows.values()))
            out.append(ReadyErrors(key, sample, rows, len(entry.rows) - len(rows)))
        return out

    def finish(self, keys: Iterable[SourceKey]) -> None:
        """The keys' errors are committed (or dropped): forget them, drop late records."""
        for key in keys:
            self._entries.pop(key, None)
            self._finished[key] = None
            self._finished.move_to_end(key)
        while len(self._finished) > self._remember:
            self._finished.popitem(last=False)

    def revoke(self, partitions: Iterable[int]) -> None:
        """The partitions went to another instance: forget their buffers and positions (the
        new owner reads them again from the committed offsets)."""
        gone = set(partitions)
        for key in [k for k, e in self._entries.items() if gone & set(e.first_offsets)]:
            del self._entries[key]
        for partition in gone:
            self._positions.pop(partition, None)

    def committable_offsets(self) -> dict[int, int]:
        """Per partition: the offset to commit (everything before it is finished)."""
        offsets = dict(self._positions)
        for entry in self._entries.values():
            for partition, first in entry.first_offsets.items():
                offsets[partition] = min(offsets.get(partition, first), first)
        return offsets
