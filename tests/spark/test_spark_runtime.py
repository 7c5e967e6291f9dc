"""The Spark tests' session holder replaces a session a failed test left unusable (_runtime.py).

Pure logic with a fake session: a real broken py4j connection takes a timed-out test to make.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from _runtime import SparkRuntime


@dataclass
class FakeSessions:
    healthy: bool = True
    started: list[int] = field(default_factory=list)
    stopped: list[int] = field(default_factory=list)

    def start(self) -> int:
        self.started.append(len(self.started))
        return self.started[-1]

    def stop(self, session: int) -> None:
        self.stopped.append(session)

    def works(self, session: int) -> bool:
        if not self.healthy:
            raise RuntimeError("SparkSession does not exist in the JVM")
        return True


def runtime(fake: FakeSessions) -> SparkRuntime[int]:
    return SparkRuntime(start=fake.start, stop=fake.stop, works=fake.works)


def test_one_session_serves_every_test_that_passes() -> None:
    fake = FakeSessions()
    spark = runtime(fake)
    assert [spark.session() for _ in range(3)] == [0, 0, 0]
    assert fake.started == [0] and spark.restarts == 0


def test_a_session_that_fails_its_check_after_a_failed_test_is_replaced() -> None:
    fake = FakeSessions()
    spark = runtime(fake)
    spark.session()
    spark.test_failed(interrupted=False)
    fake.healthy = False
    assert spark.session() == 1
    assert fake.stopped == [0] and spark.restarts == 1


def test_a_session_that_passes_its_check_after_a_failed_test_is_kept() -> None:
    fake = FakeSessions()
    spark = runtime(fake)
    spark.session()
    spark.test_failed(interrupted=False)
    assert spark.session() == 0
    assert fake.stopped == [] and spark.restarts == 0


def test_an_interrupted_call_replaces_the_session_even_if_its_check_would_pass() -> None:
    fake = FakeSessions()
    spark = runtime(fake)
    spark.session()
    spark.test_failed(interrupted=False)
    spark.test_failed(interrupted=True)
    assert spark.session() == 1
    assert spark.session() == 1, "the new session is sound until another test fails"


def test_close_stops_the_current_session_once() -> None:
    fake = FakeSessions()
    spark = runtime(fake)
    spark.session()
    spark.close()
    spark.close()
    assert fake.stopped == [0]
