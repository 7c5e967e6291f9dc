"""lakewarden events: the Avro contract in ``schemas/``, its codec, topics, thin Kafka wrappers.

Public surface (import from here)::

    encode, decode, default_codec, EventCodec, Event     single-object Avro codec
    EventDecodeError, EventEncodeError                    codec failures
    new_envelope, make_event, now_ms                      building records
    TOPICS, TopicSpec, topic_name, topic_for_event, ensure_topics
    EventProducer, EventConsumer, ConsumedEvent, EventDeliveryError

The faust codec lives in ``lakewarden.events.faust_codec`` (importing it registers
``"lakewarden-avro"``) so that importing this package never imports faust.
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
from lakewarden.events.envelope import make_event, new_envelope, now_ms

__all__ = [
    "DECODE_REASONS",
    "Event",
    "EventCodec",
    "EventDecodeError",
    "EventEncodeError",
    "decode",
    "default_codec",
    "encode",
    "make_event",
    "new_envelope",
    "now_ms",
]
