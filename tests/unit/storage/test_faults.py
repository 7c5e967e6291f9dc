"""The fault-injecting wrapper, over every backend: a failed call has no effect, a lost reply
has its effect, calls are counted, latency is added."""

from __future__ import annotations

import threading
import time

import pytest

from lakewarden.errors import RetryableError
from lakewarden.storage import AlreadyExistsError, NotFoundError, Storage, StorageIOError
from lakewarden.storage.faults import FaultyStorage, InjectedFaultError
from lakewarden.testing import ManualClock, SimulatedCrash


def test_nth_call_fails_before_its_effect(storage: Storage) -> None:
    faulty = FaultyStorage(storage)
    faulty.fail("write_if_absent", nth=2)
    faulty.write_if_absent("tl/1", b"one")
    with pytest.raises(InjectedFaultError, match="write_if_absent call 2 on 'tl/2' failed") as e:
        faulty.write_if_absent("tl/2", b"two")
    assert (e.value.operation, e.value.call, e.value.effect_applied) == (
        "write_if_absent",
        2,
        False,
    )
    assert isinstance(e.value, StorageIOError) and isinstance(e.value, RetryableError)
    assert not storage.exists("tl/2")
    faulty.write_if_absent("tl/2", b"two")  # the fault fired once; the retry goes through
    assert storage.read("tl/2") == b"two"
    assert faulty.calls("write_if_absent") == 3


def test_lost_reply_has_its_effect(storage: Storage) -> None:
    faulty = FaultyStorage(storage)
    faulty.lose_reply("write_if_absent")
    with pytest.raises(InjectedFaultError, match="reply of write_if_absent call 1 .* lost") as e:
        faulty.write_if_absent("k", b"mine")
    assert e.value.effect_applied
    assert storage.read("k") == b"mine"
    # A blind retry now loses to itself: the caller must reconcile by reading.
    with pytest.raises(AlreadyExistsError):
        faulty.write_if_absent("k", b"mine")
    assert faulty.read("k") == b"mine"


def test_lost_reply_of_a_failing_call_raises_the_real_error(storage: Storage) -> None:
    faulty = FaultyStorage(storage)
    faulty.lose_reply("read")
    with pytest.raises(NotFoundError):
        faulty.read("missing")


def test_faults_on_delete_and_list(storage: Storage) -> None:
    storage.write("a/1", b"x")
    faulty = FaultyStorage(storage)
    faulty.fail("delete")
    with pytest.raises(InjectedFaultError):
        faulty.delete("a/1")
    assert storage.exists("a/1")
    faulty.lose_reply("delete")
    with pytest.raises(InjectedFaultError):
        faulty.delete("a/1")
    assert not storage.exists("a/1")
    storage.write("a/2", b"x")
    faulty.fail("list")
    with pytest.raises(InjectedFaultError, match="list call 1 on 'a/'"):
        faulty.list("a/")
    assert [i.key for i in faulty.list("a/")] == ["a/2"]


def test_calls_are_counted_per_operation(storage: Storage) -> None:
    faulty = FaultyStorage(storage)
    faulty.write("k", b"x")
    faulty.read("k")
    faulty.read("k")
    list(faulty.list())
    faulty.exists("k")
    assert faulty.call_counts == {"write": 1, "read": 2, "list": 1, "exists": 1}
    assert faulty.calls("delete") == 0


def test_added_latency(storage: Storage) -> None:
    clock = ManualClock(skip_sleeps=True)  # the latency is recorded, not waited for
    faulty = FaultyStorage(storage, latency_s=0.05, latency_ops=["stat"], clock=clock)
    storage.write("k", b"x")
    for _ in range(3):
        faulty.stat("k")
    assert clock.slept == [0.05, 0.05, 0.05]
    faulty.read("k")  # not a latency operation
    assert clock.slept == [0.05, 0.05, 0.05]


def test_latency_sleeps_on_the_system_clock_by_default(storage: Storage) -> None:
    faulty = FaultyStorage(storage, latency_s=0.05, latency_ops=["stat"])
    storage.write("k", b"x")
    start = time.monotonic()
    faulty.stat("k")
    assert time.monotonic() - start >= 0.05  # a lower bound: never luck-dependent


def test_arming_errors(storage: Storage) -> None:
    faulty = FaultyStorage(storage)
    with pytest.raises(ValueError, match="unknown storage operation 'wirte'"):
        faulty.fail("wirte")  # type: ignore[arg-type]
    faulty.write("k", b"x")
    with pytest.raises(ValueError, match="call 1 of write already happened"):
        faulty.fail("write", nth=1)


def test_clear_faults(storage: Storage) -> None:
    faulty = FaultyStorage(storage)
    faulty.fail("write")
    faulty.clear_faults()
    faulty.write("k", b"x")
    assert storage.read("k") == b"x"


def test_wrapper_is_a_storage_with_the_same_uri(storage: Storage) -> None:
    faulty = FaultyStorage(storage)
    assert isinstance(faulty, Storage)
    assert faulty.uri == storage.uri
    assert faulty.local_path("k") == storage.local_path("k")


def test_fail_with_a_given_error_raises_it_before_the_effect(storage: Storage) -> None:
    faulty = FaultyStorage(storage)
    faulty.fail("write_if_absent", nth=2, error=SimulatedCrash("crash at the second create"))
    faulty.write_if_absent("a", b"1")
    with pytest.raises(SimulatedCrash, match="crash at the second create"):
        faulty.write_if_absent("b", b"2")
    assert not storage.exists("b")  # nothing happened
    faulty.write_if_absent("b", b"2")  # the fault fired once
    assert faulty.calls("write_if_absent") == 3


def test_before_runs_the_action_just_before_the_call_which_then_proceeds(
    storage: Storage,
) -> None:
    faulty = FaultyStorage(storage)
    seen: list[bool] = []
    faulty.before("write_if_absent", lambda: seen.append(storage.exists("k")))
    assert faulty.pending("write_if_absent") == 1
    faulty.write_if_absent("k", b"mine")
    assert seen == [False]  # ran before the call reached the store
    assert storage.read("k") == b"mine"  # and the call went through
    assert faulty.pending() == 0
    faulty.write_if_absent("k2", b"x")  # it fired once
    assert seen == [False]


def test_before_lets_another_writer_win_the_race(storage: Storage) -> None:
    faulty = FaultyStorage(storage)
    faulty.before("write_if_absent", lambda: storage.write_if_absent("k", b"theirs"))
    with pytest.raises(AlreadyExistsError):
        faulty.write_if_absent("k", b"mine")
    assert storage.read("k") == b"theirs"


def test_before_the_nth_call_only(storage: Storage) -> None:
    faulty = FaultyStorage(storage)
    ran: list[int] = []
    faulty.before("write", lambda: ran.append(faulty.calls("write")), nth=3)
    faulty.before("read", lambda: ran.append(-1))  # another operation: not triggered by writes
    for i in range(4):
        faulty.write(f"k{i}", b"x")
    assert ran == [3]  # before the third write, counted already
    assert faulty.pending() == 1 and faulty.pending("read") == 1
    with pytest.raises(ValueError, match="call 2 of write already happened"):
        faulty.before("write", lambda: None, nth=2)
    with pytest.raises(ValueError, match="unknown storage operation"):
        faulty.before("wirte", lambda: None)  # type: ignore[arg-type]


def test_before_re_armed_by_the_action_races_every_call(storage: Storage) -> None:
    faulty = FaultyStorage(storage)
    ran: list[int] = []

    def every_time() -> None:
        ran.append(faulty.calls("write"))
        faulty.before("write", every_time)  # nth=None: the call after this one

    faulty.before("write", every_time)
    for i in range(3):
        faulty.write(f"k{i}", b"x")
    assert ran == [1, 2, 3]
    faulty.clear_faults()  # stops it
    faulty.write("k3", b"x")
    assert ran == [1, 2, 3] and faulty.pending() == 0


def test_before_action_may_write_through_the_wrapper_without_deadlock(storage: Storage) -> None:
    faulty = FaultyStorage(storage)
    faulty.before("write_if_absent", lambda: faulty.write_if_absent("k", b"theirs"))
    done = threading.Event()
    outcome: list[BaseException] = []

    def mine() -> None:
        try:
            faulty.write_if_absent("k", b"mine")
        except BaseException as e:  # noqa: BLE001 - reported to the test thread
            outcome.append(e)
        done.set()

    threading.Thread(target=mine, daemon=True).start()
    assert done.wait(10), "the action deadlocked on the wrapper's lock"
    assert [type(e) for e in outcome] == [AlreadyExistsError]
    assert storage.read("k") == b"theirs"
    assert faulty.calls("write_if_absent") == 2  # the action's call is counted too


def test_before_then_the_faults_armed_for_the_same_call(storage: Storage) -> None:
    faulty = FaultyStorage(storage)
    ran: list[str] = []
    faulty.before("write", lambda: ran.append("action"))
    faulty.fail("write")
    with pytest.raises(InjectedFaultError):
        faulty.write("k", b"x")
    assert ran == ["action"] and not storage.exists("k")


def test_an_error_raised_by_the_action_stops_the_call(storage: Storage) -> None:
    faulty = FaultyStorage(storage)

    def crash() -> None:
        raise SimulatedCrash("died before writing")

    faulty.before("write", crash)
    with pytest.raises(SimulatedCrash):
        faulty.write("k", b"x")
    assert not storage.exists("k")
