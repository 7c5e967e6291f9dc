"""The ``ErrorRecord`` event (RFC-20's fields after the envelope) and the task-side publisher.

``context`` carries what the sink and people need to place a record; its keys (RFC-20 names
``commitTime``, ``tableName``, ``partitionPath``, ``recordKey``; the rest are lakewarden's)::

    commitTime    the instant of the write          tableName     the table's name
    tableId       the table's id (the event key)    tableUri      the table's root
    partitionPath where the row would have gone     recordKey     its record key ('' if null)
    taskAttempt   attempt_<jobId>_<task>_<n>        jobId         the write's committer job
    operation     insert, upsert, ...               rowIndex      row number in the task input
    kafkaTopic, kafkaPartition, kafkaOffset         where a bad record of ``lakewarden ingest``
                                                    was read (``--bad-records error-table``)
    errorTableUri, errorTableName                   the error table the writer chose (local or
                                                    global, ``lakewarden.errortable.location``);
                                                    absent: the sink's settings place it
    fileGroup     a compaction's file group         sourceFile    the base or log file that
    sourceBlock   ``<seq>@<offset>`` of the log                   held the record's version
                  block ('' for a base file)        sourceInstant the instant that wrote it

A compaction's record (``lakewarden.tableservice.unfit``) has the compaction instant as
``commitTime`` and ``<job id>_<task>`` of the executor attempt as ``taskAttempt``.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from lakewarden.events import make_event
from lakewarden.events.topics import ERRORS
from lakewarden.settings import Settings

if TYPE_CHECKING:
    from lakewarden.events import EventProducer

EVENT: Final = "ErrorRecord"
COMMIT_TIME: Final = "commitTime"
TABLE_NAME: Final = "tableName"
TABLE_ID: Final = "tableId"
TABLE_URI: Final = "tableUri"
PARTITION_PATH: Final = "partitionPath"
RECORD_KEY: Final = "recordKey"
TASK_ATTEMPT: Final = "taskAttempt"
JOB_ID: Final = "jobId"
KAFKA_TOPIC: Final = "kafkaTopic"
KAFKA_PARTITION: Final = "kafkaPartition"
KAFKA_OFFSET: Final = "kafkaOffset"
ERROR_TABLE_URI: Final = "errorTableUri"
ERROR_TABLE_NAME: Final = "errorTableName"
FILE_GROUP: Final = "fileGroup"
SOURCE_FILE: Final = "sourceFile"
SOURCE_BLOCK: Final = "sourceBlock"
SOURCE_INSTANT: Final = "sourceInstant"
REQUIRED_CONTEXT: Final = (COMMIT_TIME, TABLE_NAME, TABLE_ID, TABLE_URI, TASK_ATTEMPT)


def kafka_record_message(topic: str, partition: object, offset: object, reason: str) -> str:
    """The ``message`` of a bad Kafka record (``lakewarden ingest --bad-records error-table``)."""
    return f"bad Kafka record at topic {topic} partition {partition} offset {offset}: {reason}"


def task_row_message(where: str, row: int, reason: str) -> str:
    """The ``message`` of a bad row of a Spark write (``where`` names the task)."""
    return f"{where}, row {row} of the task's input: {reason}"


def compaction_record_message(instant: str, file_group: str, reason: str) -> str:
    """The ``message`` of a record a compaction could not write (``--bad-records``)."""
    return f"compaction {instant} of file group {file_group}: {reason}"


# What ``kafka_record_message``, ``task_row_message`` and ``compaction_record_message`` put
# before the reason: where the record came from, which ``lakewarden errors show`` prints in
# columns of its own.
MESSAGE_PREFIXES: Final = (
    re.compile(r"bad Kafka record at topic \S+ partition \d+ offset \d+: "),
    re.compile(r".*?, row \d+ of the task's input: "),
    re.compile(r"compaction \d{17} of file group \S+: "),
)


def failure_reason(message: str) -> str:
    """``message`` without the prefix that says where its record came from."""
    for prefix in MESSAGE_PREFIXES:
        found = prefix.match(message)
        if found:
            return message[found.end() :]
    return message


class InvalidErrorRecord(ValueError):
    """An ``ErrorRecord`` event the sink cannot place (its context lacks a required key)."""


@dataclass(frozen=True, slots=True)
class ErrorRow:
    """One failed record as the sink buffers it (RFC-20's fields; ``context`` never None)."""

    uid: str
    ts: str
    schema: str | None
    record: str | None
    message: str | None
    context: dict[str, str]

    @property
    def table_id(self) -> str:
        return self.context[TABLE_ID]

    @property
    def instant(self) -> str:
        return self.context[COMMIT_TIME]

    @property
    def task_attempt(self) -> str:
        return self.context[TASK_ATTEMPT]


def error_record(
    *,
    table_id: str,
    producer_id: str,
    record: dict[str, Any] | None,
    schema: str | None,
    message: str,
    context: dict[str, str],
) -> dict[str, Any]:
    """An ``ErrorRecord`` event: a fresh uid, ``ts`` = now in unix milliseconds (as text,
    RFC-20's type), the record as JSON (values without a JSON form as their ``str``)."""
    return make_event(
        EVENT,
        table_id=table_id,
        producer_id=producer_id,
        uid=str(uuid.uuid4()),
        ts=str(time.time_ns() // 1_000_000),
        schema=schema,
        record=None if record is None else json.dumps(record, default=str, sort_keys=True),
        message=message,
        context=context,
    )


def parse_error_record(record: dict[str, Any]) -> ErrorRow:
    """The sink's view of a decoded ``ErrorRecord``.

    Raises: InvalidErrorRecord (a required context key is missing or empty)."""
    context = dict(record.get("context") or {})
    missing = [key for key in REQUIRED_CONTEXT if not context.get(key)]
    if missing:
        raise InvalidErrorRecord(
            f"ErrorRecord {record.get('uid')!r} has no context {missing}: the sink cannot tell "
            "which table and instant it belongs to"
        )
    return ErrorRow(
        uid=str(record["uid"]),
        ts=str(record["ts"]),
        schema=record.get("schema"),
        record=record.get("record"),
        message=record.get("message"),
        context=context,
    )


class ErrorPublisher:
    """Publishes a task attempt's failed records; ``flush`` before the task commits, so every
    record of an attempt the driver can accept is in Kafka before its instant completes (the
    sink relies on it). The producer is created on the first record."""

    def __init__(self, settings: Settings, *, producer_id: str) -> None:
        self.settings = settings
        self.producer_id = producer_id
        self._producer: EventProducer | None = None
        self.published = 0

    def publish(self, event: dict[str, Any]) -> None:
        self._producer_client().send(EVENT, event, topic=ERRORS)
        self.published += 1

    def publish_encoded(self, value: bytes, *, key: bytes) -> None:
        """Queue an event encoded already (``lakewarden.errortable.encoder``), keyed by its
        table id. Raises: RetryableError (the local queue stayed full)."""
        self._producer_client().produce_bytes(ERRORS.name(self.settings), value, key=key)
        self.published += 1

    def _producer_client(self) -> EventProducer:
        if self._producer is None:
            # Imported here: the error table itself (reading, committing) needs no Kafka.
            from lakewarden.events import EventProducer

            self._producer = EventProducer(
                self.settings, producer_id=self.producer_id, linger_ms=20
            )
        return self._producer

    def flush(self, timeout_s: float = 30.0) -> None:
        """Raises: EventDeliveryError (the task must fail: its records are not durable)."""
        if self._producer is not None:
            self._producer.flush(timeout_s)

    def close(self) -> None:
        if self._producer is not None:
            producer, self._producer = self._producer, None
            producer.close()
