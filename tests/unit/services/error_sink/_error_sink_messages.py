"""A stand-in for the confluent-kafka messages ``ErrorSink._handle`` reads (error-sink's unit
tests drive the sink's handler directly, without a broker)."""

from __future__ import annotations

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE

TOPIC = "lakewarden.errors"


class FakeMessage:
    """What ``ErrorSink._handle`` reads of a confluent-kafka message."""

    def __init__(self, value: bytes, offset: int) -> None:
        self._value, self._offset = value, offset

    def value(self) -> bytes:
        return self._value

    def key(self) -> bytes:
        return b"t"

    def topic(self) -> str:
        return TOPIC

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def timestamp(self) -> tuple[int, int]:
        return TIMESTAMP_NOT_AVAILABLE, 0
