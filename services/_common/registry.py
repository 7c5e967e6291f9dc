"""Where each table is: a loop service's ``tables`` registry (table id -> what the service
keeps about the table, a JSON value), kept in memory for the partitions this instance owns and
in a compacted changelog topic, so that an event that names no URI can be acted on after a
restart or a rebalance, though nobody registers the table again.

cancel-manager keeps the URI a request named (a JSON string); the cleaner keeps
``{"uri", "partition"}`` (where the table lives and the ``clean.requests`` partition that
registered it). The changelog record of a table goes to the partition of the event that
registered it (the loop sets ``partition`` before it hands the event over), so the instance
that owns that partition reads it back on assignment (``changelog.recover_changelog``). The
record format is faust's (key and value JSON), the format the faust versions of these services
wrote with their ``tables`` tables, so their state carries over.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any, Final

from confluent_kafka import KafkaError, Message, TopicPartition

from lakewarden.errors import RetryableError
from lakewarden.events import EventCodec
from lakewarden.settings import Settings
from lakewarden_services._common.changelog import recover_changelog
from lakewarden_services._common.loop_service import ProducingLoop
from lakewarden_services._common.settings import Group

__all__ = ["RegistryLoop", "RegistryNotDurableError", "TablesRegistry", "changelog_key"]

log = logging.getLogger(__name__)

# Produce(key, value, partition, on_delivery): the loop's producer.
Produce = Callable[[bytes, bytes, int, Callable[[KafkaError | None, Message], None]], None]
Poll = Callable[[float], object]
# Whether a recovered value is one this service writes.
Accept = Callable[[Any], bool]

_POLL_S: Final = 0.05


class RegistryNotDurableError(RetryableError):
    """A registration was not acknowledged by the broker (the event is dead-lettered with
    ``handler_error``; its sender may register again: registration is idempotent)."""


def changelog_key(table_id: str) -> bytes:
    """A registration's changelog key: the table id as a JSON string (faust's format)."""
    return json.dumps(table_id).encode()


def _a_uri(value: Any) -> bool:
    return isinstance(value, str)


class TablesRegistry(MutableMapping[str, Any]):
    """table id -> a JSON value (by default a URI). Setting a key writes its changelog record
    to ``partition`` (the partition of the message being handled, set by the loop);
    ``wait_durable`` returns once every record written so far is acknowledged. ``accept``
    says which recovered values are the service's (the others are skipped by ``load``)."""

    def __init__(self, *, produce: Produce, poll: Poll, accept: Accept = _a_uri) -> None:
        self._produce = produce
        self._poll = poll
        self._accept = accept
        self._uris: dict[str, Any] = {}
        self.partition = 0
        self._outstanding = 0
        self._failures: list[str] = []

    def __getitem__(self, table_id: str) -> Any:
        return self._uris[table_id]

    def __setitem__(self, table_id: str, value: Any) -> None:
        self._uris[table_id] = value
        self._outstanding += 1
        self._produce(
            changelog_key(table_id), json.dumps(value).encode(), self.partition, self._delivered
        )

    def __delitem__(self, table_id: str) -> None:
        del self._uris[table_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._uris)

    def __len__(self) -> int:
        return len(self._uris)

    def load(self, records: dict[bytes, bytes]) -> list[bytes]:
        """Take the recovered changelog ``records`` (key -> value) of an assignment; return
        the keys that were not registrations (to be logged and skipped)."""
        skipped = []
        for key, value in records.items():
            try:
                table_id, kept = json.loads(key), json.loads(value)
            except ValueError:
                table_id = kept = None
            if isinstance(table_id, str) and self._accept(kept):
                self._uris[table_id] = kept
            else:
                skipped.append(key)
        return skipped

    def forget_all(self) -> None:
        """Drop every registration: the partitions were revoked (the consumer's eager
        ``range`` rebalance revokes them all, and the next assignment reads back those of
        the partitions it gives)."""
        self._uris.clear()

    def wait_durable(self, timeout_s: float) -> None:
        """Serve delivery reports until every registration written so far is acknowledged.

        Raises:
            RegistryNotDurableError: one failed, or not all were acknowledged in time.
        """
        deadline = time.monotonic() + timeout_s
        while self._outstanding > 0 and time.monotonic() < deadline:
            self._poll(_POLL_S)
        failures, self._failures = self._failures, []
        if failures or self._outstanding > 0:
            raise RegistryNotDurableError(
                "a table registration was not acknowledged by the broker: "
                + ("; ".join(failures[:3]) or f"{self._outstanding} still in flight")
                + ". Help: check the broker; the event is in the DLQ (handler_error) and can be "
                "replayed, or the table registered again (idempotent)."
            )

    def _delivered(self, err: KafkaError | None, msg: Message) -> None:
        self._outstanding = max(0, self._outstanding - 1)
        if err is not None:
            self._failures.append(str(err))


class RegistryLoop(ProducingLoop):
    """A loop that keeps a ``TablesRegistry`` (cancel-manager, the table services): its
    records go to ``changelog_topic`` on the loop's producer, at the partition of the event
    being handled; on assignment the records of the ``registrations_topic`` partitions
    assigned (``owned``) are read back before any event is handled (``recover_changelog``:
    bounded, or ``EventConsumerError`` and the loop is built again); on revocation the
    offsets are committed and the registry dropped (the eager ``range`` rebalance revokes
    every partition; the next assignment reads back what it gives)."""

    def __init__(
        self,
        settings: Settings,
        group: Group,
        *,
        service: str,
        topics: tuple[str, str],
        accept: Accept = _a_uri,
        on_ready: Callable[[], None],
        codec: EventCodec | None,
    ) -> None:
        """``topics``: the registrations topic and the registry's changelog."""
        super().__init__(
            settings, group, service=service, on_ready=on_ready, codec=codec, logger=log
        )
        self.service = service
        self.registrations_topic, self.changelog_topic = topics
        self.owned: set[int] = set()  # the registrations partitions assigned here
        self.registry = TablesRegistry(
            produce=self._produce_registration, poll=self.producer.poll, accept=accept
        )

    def subscribe(self, topics: list[str]) -> None:
        self.consumer.subscribe(
            topics, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )

    async def persisted(self) -> None:
        """Return once every registration written so far is acknowledged (a handler's
        ``persisted``). Raises: RegistryNotDurableError."""
        self.registry.wait_durable(self.settings.kafka.request_timeout_s)

    def _produce_registration(
        self,
        key: bytes,
        value: bytes,
        partition: int,
        on_delivery: Callable[[KafkaError | None, Message], None],
    ) -> None:
        self.outbox.produce(
            self.changelog_topic, value, key=key, partition=partition, on_delivery=on_delivery
        )

    def _on_assign(self, partitions: list[TopicPartition]) -> None:
        self.rebalances += 1
        mine = sorted(tp.partition for tp in partitions if tp.topic == self.registrations_topic)
        records = recover_changelog(
            self.settings, group_id=self.group_id, topic=self.changelog_topic, partitions=mine
        )
        skipped = self.registry.load(records)
        if skipped:
            log.error("unreadable registry records skipped", extra={"keys": skipped[:5]})
        self.owned = set(mine)
        log.info(
            "partitions assigned",
            extra={"partitions": mine, "tables": len(self.registry), "service": self.service},
        )
        self.ready()

    def _on_revoke(self, partitions: list[TopicPartition]) -> None:
        self.membership.revoked()
        self.commit()
        self.owned = set()
        self.registry.forget_all()

    def _on_lost(self, partitions: list[TopicPartition]) -> None:
        self.membership.lost()
        self.owned = set()
        self.registry.forget_all()
