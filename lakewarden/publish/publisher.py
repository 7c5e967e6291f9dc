"""Publishing a table's completed instants as Delta versions: exactly once, in order,
crash-safe.

Protocol of ``DeltaPublisher.sync``:

1. Load the timeline; list ``_delta_log/`` for the newest published version ``L``.
2. Learn ``since_seq`` (what version 0 holds) from version 0's ``txn`` when it exists, else
   from the table config (``TableConfig.publish``).
3. For each version ``v = L + 1, L + 2, ...`` that the timeline has an instant for, in order:
   render its bytes (``versions.render_version``) and ``write_if_absent`` them.
   - Lost the race (``AlreadyExistsError``): another publisher wrote ``v``. Its ``txn`` must
     name the same timeline seq (the content is a function of the timeline, so the bytes are
     the same); go on with ``v + 1``.
   - Outcome unknown (``StorageIOError``): read ``v`` back; absent, write it again.
4. Write the checkpoint of the newest published version that is a multiple of the
   checkpoint interval, unless ``_last_checkpoint`` names it already
   (``checkpoint.write_checkpoint``, best effort: a checkpoint only speeds readers up; a
   publisher killed before it leaves it to the next ``sync``).

A publisher killed at any point leaves a log that ends at some version ``L`` with nothing after
it; the next ``sync`` starts at ``L + 1`` (step 1). Version ``v`` is never written before
``v - 1`` exists, so the log has no gap.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from lakewarden.errors import LakewardenError
from lakewarden.storage import AlreadyExistsError, NotFoundError, Storage, StorageIOError
from lakewarden.table.config import TableConfig
from lakewarden.table.instant import Transition
from lakewarden.table.snapshot import SnapshotBuilder
from lakewarden.table.timeline import Timeline
from lakewarden.table.timeline_state import TimelineEntry, TimelineState

from .checkpoint import checkpoint_state, due_checkpoint, write_checkpoint
from .log import (
    DeltaLogCorruptError,
    last_checkpoint,
    last_version,
    read_txn_version,
    version_key,
)
from .versions import VersionPlan, plan_versions, published_instants, render_version

log = logging.getLogger(__name__)

_UNKNOWN_RETRIES = 3


@dataclass(frozen=True, slots=True)
class PublishStatus:
    """Where publishing stands: the newest published version, the newest version the
    timeline has an instant for, and the instant each names (None: none)."""

    enabled: bool
    published_version: int
    target_version: int
    published_instant: str | None = None
    target_instant: str | None = None

    @property
    def lag(self) -> int:
        """Versions the timeline has that the Delta log does not yet."""
        return max(self.target_version - self.published_version, 0)


@dataclass(frozen=True, slots=True)
class PublishResult:
    """What one ``sync`` did: the versions it wrote itself (others may have been written by a
    racing publisher) and the status after it."""

    written: tuple[int, ...]
    status: PublishStatus
    seconds: float = 0.0


class DeltaPublisher:
    """Publishes the table rooted at ``storage`` (config ``config``, timeline ``timeline``)."""

    def __init__(self, storage: Storage, config: TableConfig, timeline: Timeline) -> None:
        self.storage = storage
        self.config = config
        self.timeline = timeline
        self._since: int | None = None  # version 0's word, once read (it never changes)
        # The snapshots as of the published instants, kept so a sync applies only new ones.
        self._builder = SnapshotBuilder()

    def since_seq(self, published: int, state: TimelineState | None = None) -> int:
        """What version 0 holds: its ``txn`` when it is published, else the config's. When
        the log was trimmed (``retention``: version 0 is gone), the checkpoint it starts at
        says it: the checkpoint's ``txn`` is the seq of its version's instant, so the
        instants completed before it, less its version, are those version 0 held.

        Raises: DeltaLogCorruptError, StorageError."""
        if published < 0:
            return self.config.publish.since_seq
        if self._since is None:
            try:
                recorded = read_txn_version(self.storage, 0)
            except NotFoundError:
                state = state if state is not None else self.timeline.load()
                recorded = self._since_from_checkpoint(state)
            self._since = recorded if recorded is not None else -1
        return self._since

    def _since_from_checkpoint(self, state: TimelineState) -> int:
        start = last_checkpoint(self.storage)
        snapshot = checkpoint_state(self.storage, start) if start is not None else None
        txn = snapshot.get("txn") if snapshot is not None else None
        seq = txn.get("version") if isinstance(txn, dict) else None
        completed = [i.completed_seq or 0 for i in state.completed()]
        if start is None or not isinstance(seq, int) or seq not in completed:
            raise DeltaLogCorruptError(
                f"{self.storage.uri}: Delta version 0 is gone and no checkpoint says which "
                "timeline seq the log starts from. Help: move _delta_log/ aside and run "
                "`lakewarden publish sync` to write it anew."
            )
        base = completed.index(seq) + 1 - start  # instants version 0 held
        return completed[base - 1] if base > 0 else -1

    def status(
        self, state: TimelineState | None = None, *, published: int | None = None
    ) -> PublishStatus:
        """Where publishing stands (lists the log unless ``published`` is given)."""
        state = state if state is not None else self.timeline.load()
        if published is None:
            published = last_version(self.storage)
        since = self.since_seq(published, state)
        instants = published_instants(state, since)
        return PublishStatus(
            enabled=self.config.publish.delta,
            published_version=published,
            target_version=len(instants),
            published_instant=instants[published - 1].instant if published >= 1 else None,
            target_instant=instants[-1].instant if instants else None,
        )

    def sync(self) -> PublishResult:
        """Publish every version the timeline has and the log lacks (steps 1-4).

        Raises: DeltaLogCorruptError, UnpublishableSchemaError, StorageError."""
        started = time.perf_counter()
        state = self.timeline.load()  # 1.
        published = last_version(self.storage)
        since = self.since_seq(published, state)  # 2.
        written: list[int] = []
        for plan in plan_versions(state, since, start=published + 1, builder=self._builder):  # 3.
            if self._publish(plan):
                written.append(plan.version)
            if plan.version == 0 and self.since_seq(0) != since:
                # A racing ``publish enable`` wrote version 0 from another tail: its word holds.
                again = self.sync()
                return PublishResult((*written, *again.written), again.status, again.seconds)
            published = plan.version
        due = due_checkpoint(self.storage, self.config, published)  # 4.
        if due is not None:
            write_checkpoint(self.storage, self.config, due)
        status = self.status(state, published=published)
        return PublishResult(tuple(written), status, time.perf_counter() - started)

    def after_completed(self, entry: TimelineEntry) -> None:
        """Best effort, after this process appended ``entry``: publish when it completed an
        instant. A failure is logged, never raised (``sync`` catches up)."""
        if entry.transition is not Transition.COMPLETED:
            return
        try:
            self.sync()
        except LakewardenError as err:
            log.warning("table %s: publishing the Delta log failed (%s)", self.config.name, err)

    def _publish(self, plan: VersionPlan) -> bool:
        data = render_version(plan, self.config, self.storage)
        key = version_key(plan.version)
        for attempt in range(_UNKNOWN_RETRIES + 1):
            try:
                self.storage.write_if_absent(key, data)
                return True
            except AlreadyExistsError:
                self._check_same(plan)
                return False
            except StorageIOError as err:
                try:
                    self.storage.read(key)
                except NotFoundError:
                    if attempt == _UNKNOWN_RETRIES:
                        raise err from None
                    continue
                self._check_same(plan)
                return False
        raise AssertionError("unreachable")

    def _check_same(self, plan: VersionPlan) -> None:
        """Another publisher (or our own lost reply) wrote ``plan.version``: it must publish
        the same timeline seq."""
        if plan.instant is None:
            return  # version 0 records its own since_seq (``sync`` re-reads it)
        expected = plan.instant.completed_seq
        found = read_txn_version(self.storage, plan.version)
        if found != expected:
            raise DeltaLogCorruptError(
                f"{self.storage.uri}: Delta version {plan.version} publishes timeline seq "
                f"{found}, the timeline gives it seq {expected}. Help: the log was written by "
                "another publisher with another config; move _delta_log/ aside and run "
                "`lakewarden publish sync` to write it anew."
            )
