"""Is a job-committer running? Asked before ``Table.write`` hands it a job commit.

A ``JobCommitRequest`` is durable: sent while no job-committer runs, it waits in Kafka for one,
and the writer would wait for an answer until its timeout and then only know that the outcome
is unknown. So before sending, the writer asks the broker whether job-committer's consumer group
(``<topic prefix>job-committer``) has a member:

1. a member (or a rebalance under way, which has members): go on and send;
2. no member: ask again every ``poll_s`` until ``wait_s`` has passed (a committer that is
   starting joins meanwhile), then raise ``JobCommitterUnavailableError``: nothing was sent,
   and the writer rolls its instant back (nothing committed, nothing left behind).

A principal not allowed to describe the group skips the check (a warning is logged): the
writer then sends and waits as it would without it. A member seen is remembered for
``remember_s``, so a stream of writes asks the broker about once per ``remember_s``. A
committer that dies after the check is not this module's case: the request is durable, the
next committer resumes it, and the writer's wait is bounded by ``kafka.job_commit_timeout_s``
(``CommitStateUnknownError``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from lakewarden.clients.commit import CommitServiceUnavailableError
from lakewarden.extras import missing_extra
from lakewarden.settings import Settings

try:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient
except ImportError as err:
    raise missing_extra("kafka", "Kafka support", err) from err

log = logging.getLogger(__name__)

JOB_COMMITTER = "job-committer"

# How many members the group has; None when the broker could not say.
MemberCount = Callable[[], int | None]


class JobCommitterUnavailableError(CommitServiceUnavailableError):
    """No job-committer is running for these settings' topics: nothing was sent, the write
    was rolled back. Retryable once job-committer runs."""


def job_committer_group(settings: Settings) -> str:
    """job-committer's consumer group under the settings' topic prefix."""
    return f"{settings.kafka.topic_prefix}{JOB_COMMITTER}"


class CommitterPresence:
    """Answers "is a job-committer a member of its group?" (steps in the module docstring).
    Thread-safe; no network IO until the first ``require``."""

    def __init__(
        self,
        settings: Settings,
        *,
        wait_s: float,
        remember_s: float = 10.0,
        poll_s: float = 0.5,
        members: MemberCount | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.settings = settings
        self.group = job_committer_group(settings)
        self.wait_s = wait_s
        self.remember_s = remember_s
        self.poll_s = poll_s
        self._members = members or _BrokerMembers(settings, self.group)
        self._clock = clock
        self._sleep = sleep
        self._guard = threading.Lock()
        self._seen_at: float | None = None

    def require(self, *, table: str, instant: str) -> None:
        """Return once a job-committer is a member of its group (or was within
        ``remember_s``).

        Raises:
            JobCommitterUnavailableError: none joined within ``wait_s`` (nothing was sent).
        """
        with self._guard:
            if self._seen_at is not None and self._clock() - self._seen_at < self.remember_s:
                return
        deadline = self._clock() + self.wait_s
        while True:
            count = self._members()  # 1.
            now = self._clock()
            if count:
                with self._guard:
                    self._seen_at = now
                return
            if now >= deadline:  # 2.
                raise self._unavailable(count, table=table, instant=instant)
            self._sleep(min(self.poll_s, deadline - now))

    def forget(self) -> None:
        """Ask the broker again at the next ``require`` (after an unanswered request)."""
        with self._guard:
            self._seen_at = None

    def close(self) -> None:
        """Drop the broker connection (the next ``require`` opens another)."""
        close = getattr(self._members, "close", None)
        if close is not None:
            close()

    def _unavailable(
        self, count: int | None, *, table: str, instant: str
    ) -> JobCommitterUnavailableError:
        seen = (
            "the broker could not describe it"
            if count is None
            else "it has no member (no job-committer runs for these topics)"
        )
        return JobCommitterUnavailableError(
            f"job-committer is unavailable: consumer group {self.group!r} checked for "
            f"{self.wait_s:g} s and {seen}. Nothing was sent; instant {instant} of table "
            f"{table} is rolled back. Help: start job-committer (`lakewarden dev up` runs it, or "
            "`python -m lakewarden_services.job_committer` with the same LAKEWARDEN_KAFKA__* "
            "settings), or "
            "commit in the writing process with LAKEWARDEN_KAFKA__JOB_COMMITS=embedded.",
            table=table,
            instant=instant,
        )


class _BrokerMembers:
    """The group's member count from the broker (``describe_consumer_groups``)."""

    def __init__(self, settings: Settings, group: str) -> None:
        self.settings = settings
        self.group = group
        self._admin: AdminClient | None = None

    def __call__(self) -> int | None:
        if self._admin is None:
            self._admin = AdminClient(self.settings.kafka.librdkafka_config(logger=log))
        timeout = self.settings.kafka.request_timeout_s
        try:
            future = self._admin.describe_consumer_groups([self.group], request_timeout=timeout)
            description = future[self.group].result(timeout=timeout + 1)
        except KafkaException as err:
            code = _code(err)
            if code == KafkaError.GROUP_ID_NOT_FOUND:
                return 0
            if code == KafkaError.GROUP_AUTHORIZATION_FAILED:
                # The check is advisory: a writer whose principal may not describe the group
                # sends as before and waits up to kafka.job_commit_timeout_s for the answer.
                log.warning("no DESCRIBE on consumer group %s: not checking for it", self.group)
                return 1
            log.warning("describing consumer group %s: %s", self.group, err)
            return None
        except TimeoutError as err:
            log.warning("describing consumer group %s: %s", self.group, err)
            return None
        return len(description.members)

    def close(self) -> None:
        # An AdminClient has no close: dropping the last reference stops its threads.
        self._admin = None


def _code(err: KafkaException) -> int | None:
    error = err.args[0] if err.args else None
    return error.code() if isinstance(error, KafkaError) else None


__all__ = [
    "JOB_COMMITTER",
    "CommitterPresence",
    "JobCommitterUnavailableError",
    "job_committer_group",
]
