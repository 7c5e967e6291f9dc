"""The lakewarden event codec for faust, registered once as ``"lakewarden-avro"``.

Importing this module registers the codec (idempotently), so a service declares::

    import lakewarden.events.faust_codec  # noqa: F401  (registers "lakewarden-avro")
    topic = app.topic("lakewarden.heartbeats", value_serializer="lakewarden-avro")

Values are ``Event(name, record)`` both ways (a plain ``(name, record)`` tuple also encodes).
A value that cannot be decoded arrives as ``Undecodable(error, data)`` instead of an exception:
faust would crash the agent on a decode error, and the agent is the one that knows where the
message came from, so it dead-letters it (``dead_letter_record``) and keeps going.
"""

from __future__ import annotations

from typing import Any

from lakewarden.events.codec import Event, EventDecodeError, EventEncodeError, default_codec
from lakewarden.events.dlq import Undecodable
from lakewarden.extras import missing_extra

try:
    from faust.serializers import codecs
except ImportError as err:
    raise missing_extra("services", "The faust codec", err) from err

CODEC_NAME = "lakewarden-avro"


class LakewardenAvroCodec(codecs.Codec):
    """Single-object Avro encoding of lakewarden events (see ``lakewarden.events.codec``)."""

    def _dumps(self, obj: Any) -> bytes:
        """Encode an ``Event`` or ``(name, record)`` tuple.

        Raises:
            EventEncodeError: not an event, or the record does not fit its schema.
        """
        if not (isinstance(obj, tuple) and len(obj) == 2 and isinstance(obj[0], str)):
            raise EventEncodeError(
                type(obj).__name__, "faust values must be Event(name, record) tuples"
            )
        return default_codec().encode(obj[0], obj[1])

    def _loads(self, s: bytes) -> Event | Undecodable:
        try:
            return default_codec().decode(s)
        except EventDecodeError as err:
            return Undecodable(err, bytes(s))


def register() -> None:
    """Register ``"lakewarden-avro"`` with faust (safe to call again)."""
    if not isinstance(codecs.codecs.get(CODEC_NAME), LakewardenAvroCodec):
        codecs.register(CODEC_NAME, LakewardenAvroCodec())


register()
