"""lakewarden events: the Avro contract in ``schemas/``, its codec, topics, thin Kafka wrappers.

Public surface (import from here)::

    encode, decode, default_codec, EventCodec, Event     single-object Avro codec
    EventDecodeError, EventEncodeError, DECODE_REASONS    codec failures
    new_envelope, make_event, now_ms                      building records
    TOPICS, TopicSpec, topic_for_event, ensure_topics     topics (and the specs, e.g. DLQ)
    EventProducer, EventDeliveryError                     keyed, encoding producer
    EventConsumer, ConsumedEvent, EventConsumerError      the one consumer (events or messages)
    dead_letter_record, Rejection, Undecodable            the dead-letter contract
    sample_events                                         one realistic record per event

The faust codec lives in ``lakewarden.events.faust_codec`` (importing it registers
``"lakewarden-avro"``) so that importing this package never imports faust; the hypothesis
strategies live in ``lakewarden.events.strategies`` (dev extra).
"""

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
from lakewarden.events.dlq import Rejection, Undecodable, dead_letter_record
from lakewarden.events.envelope import make_event, new_envelope, now_ms
from lakewarden.events.producer import EventDeliveryError, EventProducer
from lakewarden.events.samples import sample_events
from lakewarden.events.topics import DLQ, TOPICS, TopicSpec, ensure_topics, topic_for_event

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
