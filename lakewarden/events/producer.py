"""EventProducer: encode an event, key it by table id, produce it with confluent-kafka.

``kafka_producer`` is the one place a confluent-kafka ``Producer`` is built from settings:
``EventProducer``, the lock client, heartbeats and the plain-loop services all use it, each
with its own overrides of the durable defaults.

No network IO happens until the first ``send``; the librdkafka client is created lazily.
Delivery is asynchronous: ``flush`` waits for outstanding messages and raises if any of them
(or any earlier one) failed, so a caller that needs durability flushes before acting on it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from types import TracebackType
from typing import Any

from lakewarden.errors import RetryableError
from lakewarden.events.codec import EventCodec, default_codec
from lakewarden.events.kafka_errors import AuthWatch
from lakewarden.events.topics import TopicSpec, topic_for_event
from lakewarden.extras import missing_extra
from lakewarden.settings import Settings

try:
    from confluent_kafka import KafkaError, KafkaException, Message, Producer
except ImportError as err:
    raise missing_extra("kafka", "Kafka support", err) from err

log = logging.getLogger(__name__)

# Durable by default: every in-sync replica has the message, and retries cannot duplicate it.
# librdkafka's own log lines go to this module's logger instead of stderr.
_DEFAULT_CONFIG: dict[str, Any] = {"acks": "all", "enable_idempotence": True, "logger": log}


def producer_config(
    settings: Settings, *, logger: logging.Logger = log, **config: Any
) -> dict[str, Any]:
    """The librdkafka configuration of a producer for ``settings``: durable by default
    (``acks=all``, idempotent), librdkafka's log lines to ``logger``; ``config`` overrides
    with underscores for dots (``linger_ms=0``).

    Raises:
        ConfigurationError: Kafka is not configured.
    """
    return settings.kafka.librdkafka_config(**{**_DEFAULT_CONFIG, "logger": logger, **config})


def kafka_producer(
    settings: Settings,
    *,
    logger: logging.Logger = log,
    error_cb: Callable[[KafkaError], None] | None = None,
    **config: Any,
) -> Producer:
    """A confluent-kafka ``Producer`` configured by ``producer_config``, with ``error_cb``
    (librdkafka's key has an underscore) when given. No network IO yet.

    Raises:
        ConfigurationError: Kafka is not configured.
    """
    built = producer_config(settings, logger=logger, **config)
    if error_cb is not None:
        built["error_cb"] = error_cb
    return Producer(built)


class EventDeliveryError(RetryableError):
    """Messages were not delivered (broker unreachable, timeout, rejected); ``failures``
    lists ``(topic, error)`` for each failed message, ``undelivered`` counts those still queued."""

    def __init__(self, failures: list[tuple[str, str]], undelivered: int) -> None:
        shown = "; ".join(f"{topic}: {error}" for topic, error in failures[:5])
        super().__init__(
            f"{len(failures)} message(s) failed and {undelivered} still undelivered"
            + (f" ({shown})" if shown else "")
            + ". Help: check the broker is up and the topics exist (ensure_topics)."
        )
        self.failures = failures
        self.undelivered = undelivered


class EventProducer:
    """Produces lakewarden events; one per process or thread is enough (it batches).

    ``config`` overrides librdkafka settings with underscores for dots (``linger_ms=0``).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        producer_id: str,
        codec: EventCodec | None = None,
        **config: Any,
    ) -> None:
        self.settings = settings
        self.producer_id = producer_id
        self._codec = codec
        self._config = config
        self._producer: Producer | None = None
        self._failures: list[tuple[str, str]] = []
        # librdkafka's own log lines (to ``log``) still say what failed; the watch only
        # remembers a refused login, so ``flush`` can say so instead of "undelivered".
        self._auth = AuthWatch(settings.kafka)
        self.delivered = 0

    @property
    def codec(self) -> EventCodec:
        if self._codec is None:
            self._codec = default_codec()
        return self._codec

    def send(
        self,
        event: str,
        record: dict[str, Any],
        *,
        topic: TopicSpec | str | None = None,
        partition: int | None = None,
    ) -> None:
        """Encode ``record`` as ``event`` and queue it, keyed by ``envelope.table_id``.

        ``topic`` defaults to the event's topic (``topic_for_event``); a ``str`` is a full name.

        Raises:
            EventEncodeError: the record does not fit the schema.
            ConfigurationError: no topic carries ``event`` / Kafka is not configured.
            RetryableError: the local queue stayed full or librdkafka refused the message.
        """
        value = self.codec.encode(event, record)
        key = record["envelope"]["table_id"].encode()
        if topic is None:
            topic = topic_for_event(event)
        name = topic if isinstance(topic, str) else topic.name(self.settings)
        self.produce_bytes(name, value, key=key, partition=partition)

    def produce_bytes(
        self, topic: str, value: bytes, *, key: bytes | None, partition: int | None = None
    ) -> None:
        """Queue already-encoded bytes (for relays and tools; services use ``send``).

        Raises:
            ConfigurationError: Kafka is not configured.
            RetryableError: the local queue stayed full or librdkafka refused the message.
        """
        producer = self._client()
        kwargs: dict[str, Any] = {"key": key, "on_delivery": self._on_delivery}
        if partition is not None:
            kwargs["partition"] = partition
        for _ in range(100):
            try:
                producer.produce(topic, value, **kwargs)
                break
            except BufferError:
                # The local queue is full: serve delivery reports to make room, then retry.
                producer.poll(0.1)
            except KafkaException as err:
                raise RetryableError(f"Cannot produce to {topic}: {err}") from err
        else:
            raise RetryableError(f"Local producer queue stayed full for 10 s (topic {topic})")
        producer.poll(0)

    def connect(self, topic: TopicSpec | str, timeout_s: float | None = None) -> None:
        """Create the client and fetch ``topic``'s metadata now, rather than at the first
        ``send``: a caller that waits for each send's delivery (the timeline announcer) pays
        for the connection before its first wait.

        Raises:
            RetryableError: the broker did not answer within ``timeout_s`` (default: the
                settings' request timeout).
        """
        name = topic if isinstance(topic, str) else topic.name(self.settings)
        timeout = self.settings.kafka.request_timeout_s if timeout_s is None else timeout_s
        try:
            self._client().list_topics(name, timeout=timeout)
        except KafkaException as err:
            raise RetryableError(f"Cannot reach the broker for {name}: {err}") from err

    def flush(self, timeout_s: float | None = None) -> None:
        """Wait until every queued message is delivered or failed.

        Raises:
            KafkaAuthenticationError: messages are undelivered and the broker refused the
                credentials.
            EventDeliveryError: a message failed since the last flush, or some are still
                queued after ``timeout_s`` (default: the settings' request timeout).
        """
        if self._producer is None:
            return
        timeout = self.settings.kafka.request_timeout_s if timeout_s is None else timeout_s
        undelivered = self._producer.flush(timeout)
        failures, self._failures = self._failures, []
        if failures or undelivered:
            self._auth.raise_if_refused()
            raise EventDeliveryError(failures, undelivered)

    def close(self, timeout_s: float | None = None) -> None:
        """Flush and drop the client (a later ``send`` creates a new one).

        Raises:
            EventDeliveryError: as ``flush``.
        """
        try:
            self.flush(timeout_s)
        finally:
            self._producer = None

    def __enter__(self) -> EventProducer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _client(self) -> Producer:
        if self._producer is None:
            self._producer = kafka_producer(self.settings, **self._config, error_cb=self._auth)
        return self._producer

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            self.delivered += 1
            return
        self._failures.append((str(msg.topic()), str(err)))
        log.error(
            "event delivery failed",
            extra={
                "kafka_topic": msg.topic(),
                "kafka_error": str(err),
                "producer_id": self.producer_id,
            },
        )
