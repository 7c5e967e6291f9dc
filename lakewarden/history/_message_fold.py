"""Replay's hot loop: a batch of raw timeline messages folded straight into a ``TopicReplay``.

``read_table_events`` serves every history command: it yields a ``Recorded`` per event (six
message accessors, the partition bookkeeping, a generator step), and ``TopicReplay.feed``
then checks each field's type before it builds the ``LeanEntry``. For ``lakewarden replay``
(a million timeline events) that was as much work again as reading and decoding them.
``MessageFold.fold`` takes a whole ``consume`` batch instead and, per message:

1. calls two accessors (value, key); a message keyed by the table whose header is the
   current ``TimelineTransition`` schema's is decoded here with that schema's body reader
   (``EventCodec.body_reader``: what ``decode`` runs for that header);
2. builds the ``LeanEntry`` from the decoded record without the type checks: the record was
   just decoded by the Avro schema, so ``seq`` and ``lock_token`` are integers (or None),
   ``wall_time`` the epoch ms the ``epoch_ms`` codec returns, the other fields strings and
   the enums their symbols. What Avro cannot express is checked as ``TimelineEntry``
   checks it: ``seq >= 0``, the instant 17 decimal digits (``str.isdecimal`` is exactly
   the Unicode category ``Nd`` that the pattern's ``\\d`` matches), a non-empty actor, the
   action and transition known, the payload a JSON object (validated once per distinct text
   as the fast rule's model, ``PayloadTexts``; when ``optimistic``, a ``requested``,
   ``inflight`` or ``completed`` payload is taken as a valid JSON object and kept for the
   checker process);
3. hands the entry to ``TopicReplay.take`` (seq order, redeliveries, conflicts, the fold).

Every other message takes the general path, unchanged: ``decode_message`` (another header,
e.g. an older schema version; another key; a body that does not decode: an ``Unreadable``,
returned) and ``TopicReplay.feed`` (a record that does not make a ``LeanEntry``). So the
fold decides what ``feed`` over ``read_table_events`` decides, message for message
(``tests/unit/history/test_message_fold.py`` runs the lean fold's generated histories
through both).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from io import BytesIO
from typing import Any, Final

from pydantic import BaseModel

from lakewarden.events.codec import HEADER_SIZE, EventCodec
from lakewarden.extras import missing_extra
from lakewarden.history._lean_fold import UNCHECKED, LeanEntry
from lakewarden.history._validate import CHECKED
from lakewarden.history.model import Recorded, Unreadable
from lakewarden.history.reader import decode_message
from lakewarden.history.replay import TopicReplay
from lakewarden.table.instant import Action, Transition

try:
    from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, KafkaError, Message
except ImportError as err:
    raise missing_extra("kafka", "Kafka support", err) from err

_EVENT: Final = "TimelineTransition"
_ACTIONS: Final[dict[str, Action]] = {a.value: a for a in Action}
_TRANSITIONS: Final[dict[str, Transition]] = {t.value: t for t in Transition}
_UNSEEN: Any = object()
_Kind = tuple[
    Transition,
    dict[str, BaseModel | None] | None,
    Callable[[LeanEntry], bool] | None,
    list[str] | None,
]


class MessageFold:
    """Folds raw messages of one table's timeline topic into ``replay``, batch by batch.

    ``codec`` must decode times as epoch ms (``epoch_ms_codec()``), as ``read_table_events``
    does. ``optimistic``: the ``requested``, ``inflight`` and ``completed`` payloads of the
    entries made here are not validated but folded as valid (``UNCHECKED``) and their texts kept, in
    order, for ``unchecked()`` to hand to a second process (``_validate``); the fold is
    right only when that process finds every one of them valid. Not thread-safe.

    Raises:
        ValueError: ``codec`` decodes times as ``datetime``.
    """

    def __init__(
        self,
        replay: TopicReplay,
        table_id: str,
        codec: EventCodec,
        *,
        on_error: Callable[[KafkaError], None] | None = None,
        optimistic: bool = False,
    ) -> None:
        fold = replay.lean_fold
        if fold is None:
            raise ValueError("MessageFold needs a TopicReplay that folds (fold=True)")
        if codec.timestamps != "epoch_ms":
            raise ValueError("MessageFold needs a codec that decodes times as epoch ms")
        self._replay = replay
        self._fold = fold
        self._table_id = table_id
        self._key = table_id.encode()
        self._codec = codec
        self._header, self._read = codec.body_reader(_EVENT)
        self._on_error = on_error
        self._optimistic = optimistic
        self._kinds: dict[str, _Kind] = {}
        self.unchecked()

    def unchecked(self) -> tuple[list[str], ...]:
        """The payload texts folded unchecked since the last call, a list per transition of
        ``CHECKED``, each in the order its entries were made (empty unless ``optimistic``)."""
        # By the transition's name as decoded: its member, the validated-model cache of a
        # fast transition, its fast step (None for the others) and, when optimistic, the
        # list its unchecked texts go to; one lookup an event.
        models, steps = self._replay.texts.models_by_name, self._fold.fast_by_name
        kept: dict[str, list[str]] = {name: [] for name in CHECKED} if self._optimistic else {}
        before = self._kinds
        self._kinds = {
            name: (t, None if name in kept else models.get(name), steps.get(name), kept.get(name))
            for name, t in _TRANSITIONS.items()
        }
        return tuple(before.get(name, (None, None, None, None))[3] or [] for name in CHECKED)

    def fold(self, messages: Iterable[Message]) -> list[Unreadable]:
        """Fold every message of ``messages`` (a ``consume`` batch); the ones that do not
        decode are returned, those of other tables skipped, those that carry a consumer
        error handed to ``on_error`` (they have no key: the general path sees them).

        The entry that is the next seq while none waits (almost all of them) is stored and
        folded here, as ``TopicReplay.take`` would (its ``next_seq`` is kept in a local and
        written back before anything else reads it); any other goes through ``take``."""
        unreadable: list[Unreadable] = []
        replay, table_id, key, header, read = (
            self._replay, self._table_id, self._key, self._header, self._read,
        )  # fmt: skip
        texts, stored, waiting = replay.texts, replay.entries.raw, replay.waiting
        parsed, judged, kinds = texts.parsed, self._fold.judged, self._kinds
        actions = _ACTIONS
        following = replay.next_seq
        try:
            for msg in messages:
                value = msg.value()
                if msg.key() != key or value is None or value[:HEADER_SIZE] != header:
                    replay.next_seq = following
                    self._general(msg, unreadable)
                    following = replay.next_seq
                    continue
                buffer = BytesIO(value)
                buffer.seek(HEADER_SIZE)
                try:
                    record = read(buffer)  # 1.
                except Exception:  # noqa: BLE001 - any corruption; decode_message names it
                    record = None
                if record is None or buffer.tell() != len(value):
                    replay.next_seq = following
                    self._general(msg, unreadable)
                    following = replay.next_seq
                    continue
                if record["envelope"]["table_id"] != table_id:
                    continue  # keyed by the table, about another: not this table's event
                entry: LeanEntry | None = None
                try:  # 2.
                    seq, instant, actor = record["seq"], record["instant"], record["actor"]
                    action = actions.get(record["action"])
                    kind = kinds.get(record["transition"])
                    text = record["payload"] or "{}"
                    if (
                        seq >= 0
                        and len(instant) == 17
                        and instant.isdecimal()
                        and actor
                        and action is not None
                        and kind is not None
                    ):
                        transition, cache, step, unchecked = kind
                        if unchecked is not None:  # checked by the second process
                            unchecked.append(text)
                            model: BaseModel | None = UNCHECKED
                        else:  # a fast transition's payload: validated once per text
                            model = None if cache is None else cache.get(text, _UNSEEN)
                            if model is _UNSEEN:
                                model = texts.model(transition, text)
                        if model is not None or type(parsed(text)) is dict:
                            entry = (
                                seq, instant, action, transition, actor,
                                record["lock_token"], record["wall_time"], text, model,
                            )  # fmt: skip
                except ValueError:  # the payload is not JSON: ``feed`` decides what it makes
                    pass
                if entry is not None and seq == following and not waiting:  # 3., inline
                    stored[seq] = entry
                    following = seq + 1
                    if step is None or not step(entry):
                        judged(entry)
                    continue
                replay.next_seq = following
                if entry is not None:
                    replay.take(entry)
                else:
                    replay.feed(_recorded(msg, record))
                following = replay.next_seq
        finally:
            replay.next_seq = following
        return unreadable

    def _general(self, msg: Message, unreadable: list[Unreadable]) -> None:
        """Any message the fast path does not take, as ``read_table_events`` reads it."""
        error = msg.error()
        if error is not None:
            if self._on_error is not None:
                self._on_error(error)
            return
        kind, stamp = msg.timestamp()
        item = decode_message(
            msg.value() or b"",
            msg.key(),
            table_id=self._table_id,
            codec=self._codec,
            topic=msg.topic() or "",
            partition=msg.partition() or 0,
            offset=msg.offset() or 0,
            broker_ms=None if kind == TIMESTAMP_NOT_AVAILABLE else stamp,
            table_key=self._key,
        )
        if isinstance(item, Unreadable):
            unreadable.append(item)
        elif item is not None:
            self._replay.feed(item)


def _recorded(msg: Message, record: dict[str, Any]) -> Recorded:
    kind, stamp = msg.timestamp()
    return Recorded(
        _EVENT,
        record,
        msg.topic() or "",
        msg.partition() or 0,
        msg.offset() or 0,
        None if kind == TIMESTAMP_NOT_AVAILABLE else stamp,
    )


__all__ = ["MessageFold"]
