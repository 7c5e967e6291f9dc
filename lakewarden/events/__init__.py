"""lakewarden events: the Avro contract in ``schemas/``, its codec, topics, thin Kafka wrappers.

Public surface (import from here)::

    encode, decode, default_codec, EventCodec, Event     single-object Avro codec
    EventDecodeError, EventEncodeError, DECODE_REASONS    codec failures
    new_envelope, make_event, now_ms                      building records
    TOPICS, TopicSpec, topic_for_event, ensure_topics     topics (and the specs, e.g. DLQ)
    EventProducer, EventDeliveryError                     keyed, encoding producer
    EventConsumer, ConsumedEvent, EventConsumerError      the one consumer (events or messages)
    dead_letter_record, Rejection, Undecodable            the dead-letter contract
    InvalidEvent                                          a decodable event a service rejects
    sample_events                                         one realistic record per event

The hypothesis strategies live in ``lakewarden.events.strategies`` (dev extra).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakewarden._lazy import lazy_exports

if TYPE_CHECKING:
    from lakewarden.events.codec import (
        DECODE_REASONS,
        Event,
        EventCodec,
        EventDecodeError,
        EventEncodeError,
        decode,
        default_codec,
        encode,
    )
    from lakewarden.events.consumer import ConsumedEvent, EventConsumer, EventConsumerError
    from lakewarden.events.dlq import InvalidEvent, Rejection, Undecodable, dead_letter_record
    from lakewarden.events.envelope import make_event, new_envelope, now_ms
    from lakewarden.events.producer import EventDeliveryError, EventProducer
    from lakewarden.events.samples import sample_events
    from lakewarden.events.topics import DLQ, TOPICS, TopicSpec, ensure_topics, topic_for_event

# Imported on first use (PEP 562): the codec, envelopes and topic names are pure, and a
# process without the kafka extra (a local table, its error table) imports them; the
# producer and the consumer need confluent-kafka.
_EXPORTS: dict[str, str] = {
    "DECODE_REASONS": "lakewarden.events.codec",
    "Event": "lakewarden.events.codec",
    "EventCodec": "lakewarden.events.codec",
    "EventDecodeError": "lakewarden.events.codec",
    "EventEncodeError": "lakewarden.events.codec",
    "decode": "lakewarden.events.codec",
    "default_codec": "lakewarden.events.codec",
    "encode": "lakewarden.events.codec",
    "ConsumedEvent": "lakewarden.events.consumer",
    "EventConsumer": "lakewarden.events.consumer",
    "EventConsumerError": "lakewarden.events.consumer",
    "InvalidEvent": "lakewarden.events.dlq",
    "Rejection": "lakewarden.events.dlq",
    "Undecodable": "lakewarden.events.dlq",
    "dead_letter_record": "lakewarden.events.dlq",
    "make_event": "lakewarden.events.envelope",
    "new_envelope": "lakewarden.events.envelope",
    "now_ms": "lakewarden.events.envelope",
    "EventDeliveryError": "lakewarden.events.producer",
    "EventProducer": "lakewarden.events.producer",
    "sample_events": "lakewarden.events.samples",
    "DLQ": "lakewarden.events.topics",
    "TOPICS": "lakewarden.events.topics",
    "TopicSpec": "lakewarden.events.topics",
    "ensure_topics": "lakewarden.events.topics",
    "topic_for_event": "lakewarden.events.topics",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = [
    "DECODE_REASONS",
    "DLQ",
    "TOPICS",
    "ConsumedEvent",
    "Event",
    "EventCodec",
    "EventConsumer",
    "EventConsumerError",
    "EventDecodeError",
    "EventDeliveryError",
    "EventEncodeError",
    "EventProducer",
    "InvalidEvent",
    "Rejection",
    "TopicSpec",
    "Undecodable",
    "dead_letter_record",
    "decode",
    "default_codec",
    "encode",
    "ensure_topics",
    "make_event",
    "new_envelope",
    "now_ms",
    "sample_events",
    "topic_for_event",
]
