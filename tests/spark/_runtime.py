"""The Spark tests' one session, rebuilt when a test leaves it unusable.

One local Spark session serves every Spark test of a pytest worker: starting one costs about ten
seconds. A test that times out is interrupted by pytest-timeout in the middle of a py4j call; the
JVM's answer to that call then arrives later and is read as the answer to the *next* call, so
every later Spark test of that worker fails with errors that have nothing to do with it
("SparkSession does not exist in the JVM", ``KeyError: 'm'``). A fresh-clone CI run at a load
average of 50 once turned one timeout into 35 failures that way.

So the session is handed out through a :class:`SparkRuntime`. After a Spark test fails it is
*suspect*: the next test first checks it with a tiny job, and starts a new JVM if the check
fails. After a timeout it is *broken*: the connection cannot be trusted even if a check passes,
so the next test gets a new JVM without asking.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Generic, TypeVar

Session = TypeVar("Session")


class Condition(enum.Enum):
    SOUND = "sound"
    SUSPECT = "suspect"  # a test using it failed: check before handing it out again
    BROKEN = "broken"  # a call was interrupted: never hand it out again


class SparkRuntime(Generic[Session]):
    """Hands out one session and replaces it when it can no longer be trusted.

    ``start`` builds a session, ``stop`` tears one down (it must not raise for a dead one),
    ``works`` runs a cheap end-to-end check (a job, not just a py4j ping: a desynchronised
    connection can answer a ping with a stale reply).
    """

    def __init__(
        self,
        start: Callable[[], Session],
        stop: Callable[[Session], None],
        works: Callable[[Session], bool],
    ) -> None:
        self._start, self._stop, self._works = start, stop, works
        self._session: Session | None = None
        self._condition = Condition.SOUND
        self.restarts = 0

    def session(self) -> Session:
        """The session for the next test: the current one when it can be trusted, else a new one."""
        if self._session is None:
            self._session = self._start()
        elif self._condition is Condition.BROKEN or (
            self._condition is Condition.SUSPECT and not self._check()
        ):
            self._replace()
        self._condition = Condition.SOUND
        return self._session

    def test_failed(self, *, interrupted: bool) -> None:
        """Record that a test using the session failed; ``interrupted`` when it timed out."""
        if interrupted:
            self._condition = Condition.BROKEN
        elif self._condition is Condition.SOUND:
            self._condition = Condition.SUSPECT

    def close(self) -> None:
        if self._session is not None:
            self._stop(self._session)
            self._session = None

    def _check(self) -> bool:
        assert self._session is not None
        try:
            return self._works(self._session)
        except Exception:  # any failure of the check means the session cannot be trusted
            return False

    def _replace(self) -> None:
        self.close()
        self._session = self._start()
        self.restarts += 1


__all__ = ["Condition", "SparkRuntime"]
