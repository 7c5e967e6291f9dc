"""``FaultyStorage``: a storage wrapper that injects faults, the test harness for every caller.

Three faults, chosen per operation and call number:

- ``fail``: the call raises ``InjectedFaultError`` (a ``StorageIOError``) *before* reaching
  the wrapped storage, so nothing happened; or the given ``error`` instead (a test's
  ``SimulatedCrash``, a ``BaseException`` no stage handles, kills the caller right there);
- ``lose_reply``: the call reaches the wrapped storage and takes effect, then raises
  ``InjectedFaultError`` as a lost network reply would. Callers must reconcile by reading
  state, never assume the write failed. If the wrapped call itself raises, that error
  propagates unchanged (there was no reply to lose).
- ``before``: ``action()`` runs just before the call reaches the wrapped storage, then the
  call proceeds (or meets the ``fail``/``lose_reply`` armed for it). A test slips another
  writer's step in between a caller's read and its write: a deterministic race. The action
  runs outside the wrapper's lock, so it may call the wrapped storage or this wrapper (its
  calls are counted, and the faults armed for them fire); it may re-arm itself with
  ``nth=None`` (the next call after the ones made so far) to race every attempt. An error it
  raises propagates and the call does not happen.

Optionally every call (or every call of some operations) sleeps ``latency_s`` first, to
model a remote store (the timeline benchmark uses 5 ms per metadata call).

Calls are counted per operation from construction, faulted ones included; ``nth`` numbers
are these counts (1-based), so ``fail("write_if_absent", nth=faulty.calls("write_if_absent")
+ 1)`` targets the next call, which is also what ``nth=None`` means.

This is the one storage fault mechanism (as Hadoop's ``UnreliableManifestStoreOperations``
injects faults through the store interface itself); the job commit's other fault point is
its stage hook (``lakewarden.commit.stages.StageHook``).

Usage::

    faulty = FaultyStorage(LocalStorage(tmp_path))
    faulty.lose_reply("write_if_absent")        # the next one lands, then "fails"
    with pytest.raises(InjectedFaultError):
        faulty.write_if_absent("k", b"v")
    assert faulty.read("k") == b"v" and faulty.pending() == 0
    faulty.before("write_if_absent", lambda: faulty.inner.write_if_absent("k2", b"theirs"))
    with pytest.raises(AlreadyExistsError):     # another writer got there first
        faulty.write_if_absent("k2", b"mine")
"""

from __future__ import annotations

import enum
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from typing import TypeVar

from lakewarden.clock import SYSTEM_CLOCK, Clock
from lakewarden.storage import Storage, StorageIOError
from lakewarden.storage._forwarding import OPERATIONS, ForwardingStorage, Operation

T = TypeVar("T")

__all__ = ["OPERATIONS", "FaultKind", "FaultyStorage", "InjectedFaultError", "Operation"]


class FaultKind(enum.Enum):
    FAIL = "fail"
    LOSE_REPLY = "lose_reply"


class InjectedFaultError(StorageIOError):
    """A fault ``FaultyStorage`` injected; ``effect_applied`` tells whether the call took
    effect before it was raised (``lose_reply``) or not (``fail``)."""

    def __init__(
        self, message: str, *, key: str, operation: Operation, call: int, effect_applied: bool
    ) -> None:
        super().__init__(message, key=key)
        self.operation = operation
        self.call = call
        self.effect_applied = effect_applied


class FaultyStorage(ForwardingStorage):
    """Wraps ``inner``; faults are armed with ``fail``, ``lose_reply`` and ``before``.
    Thread-safe."""

    def __init__(
        self,
        inner: Storage,
        *,
        latency_s: float = 0.0,
        latency_ops: Iterable[Operation] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__(inner)
        self.latency_s = latency_s
        self.clock = clock  # sleeps the latency (a test's ManualClock records it instead)
        self.latency_ops = frozenset(OPERATIONS if latency_ops is None else latency_ops)
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._armed: dict[tuple[Operation, int], tuple[FaultKind, BaseException | None]] = {}
        self._actions: dict[tuple[Operation, int], list[Callable[[], object]]] = {}

    def __repr__(self) -> str:
        return f"FaultyStorage({self.inner!r})"

    # -- arming -------------------------------------------------------------------------------

    def fail(
        self, op: Operation, *, nth: int | None = None, error: BaseException | None = None
    ) -> None:
        """Make call ``nth`` of ``op`` (default: the next) raise before taking effect:
        ``InjectedFaultError``, or ``error`` when given.

        Raises: ValueError (unknown operation, or ``nth`` already past)."""
        self._arm(op, nth, FaultKind.FAIL, error)

    def lose_reply(self, op: Operation, *, nth: int | None = None) -> None:
        """Make call ``nth`` of ``op`` (default: the next) take effect, then raise.

        Raises: ValueError (unknown operation, or ``nth`` already past)."""
        self._arm(op, nth, FaultKind.LOSE_REPLY)

    def before(
        self, op: Operation, action: Callable[[], object], *, nth: int | None = None
    ) -> None:
        """Run ``action()`` just before call ``nth`` of ``op`` (default: the next) reaches the
        wrapped storage; the call then proceeds. Several actions for one call run in the
        order armed. To race every attempt, the action re-arms itself (``nth=None``).

        Raises: ValueError (unknown operation, or ``nth`` already past)."""
        with self._lock:
            call = self._next_call(op, nth)
            self._actions.setdefault((op, call), []).append(action)

    def _arm(
        self,
        op: Operation,
        nth: int | None,
        kind: FaultKind,
        error: BaseException | None = None,
    ) -> None:
        with self._lock:
            self._armed[(op, self._next_call(op, nth))] = (kind, error)

    def _next_call(self, op: Operation, nth: int | None) -> int:
        """The call number ``nth`` designates (the next call when None); under the lock.

        Raises: ValueError (unknown operation, or that call already happened)."""
        if op not in OPERATIONS:  # a typo would otherwise arm a fault that never fires
            raise ValueError(f"unknown storage operation {op!r}; one of {OPERATIONS}")
        done = self._counts[op]
        call = done + 1 if nth is None else nth
        if call <= done:
            raise ValueError(f"call {call} of {op} already happened ({done} so far)")
        return call

    def clear_faults(self) -> None:
        """Disarm every fault and action not yet fired."""
        with self._lock:
            self._armed.clear()
            self._actions.clear()

    def pending(self, op: Operation | None = None) -> int:
        """How many calls (of ``op``, or of any operation) still have a fault or an action
        armed: 0 once every armed one has fired (or was cleared)."""
        with self._lock:
            armed = set(self._armed) | set(self._actions)
            return sum(1 for armed_op, _ in armed if op is None or armed_op == op)

    def calls(self, op: Operation) -> int:
        """How many times ``op`` was called so far (faulted calls included)."""
        with self._lock:
            return self._counts[op]

    @property
    def call_counts(self) -> dict[str, int]:
        """Calls so far, by operation (only operations called at least once)."""
        with self._lock:
            return dict(self._counts)

    # -- the hook -----------------------------------------------------------------------------

    def _invoke(self, op: Operation, key: str, call: Callable[[], T]) -> T:
        with self._lock:
            self._counts[op] += 1
            number = self._counts[op]
            kind, error = self._armed.pop((op, number), (None, None))
            actions = self._actions.pop((op, number), [])
        for action in actions:  # unlocked: an action may call this wrapper, or arm faults
            action()
        if self.latency_s > 0 and op in self.latency_ops:
            self.clock.sleep(self.latency_s)
        if error is not None:
            raise error
        if kind is FaultKind.FAIL:
            raise InjectedFaultError(
                f"injected fault: {op} call {number} on {key!r} failed before its effect",
                key=key,
                operation=op,
                call=number,
                effect_applied=False,
            )
        result = call()
        if kind is FaultKind.LOSE_REPLY:
            raise InjectedFaultError(
                f"injected fault: the reply of {op} call {number} on {key!r} was lost "
                "after its effect",
                key=key,
                operation=op,
                call=number,
                effect_applied=True,
            )
        return result
