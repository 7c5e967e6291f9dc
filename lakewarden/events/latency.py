"""The librdkafka settings of every client whose caller waits for an answer, in one place.

A request/reply path is as slow as its slowest client: the lock client and timeline-lock,
cancel-manager and its ``CancelClient``, and the echo floor the benchmarks measure them
against (``benchmarks._echo_floor``) all use these, so a ratio to the floor compares the
services' own work and never a setting one side has and the other has not.

- **producer**: ``linger.ms`` 0 (``queue.buffering.max.ms`` is its alias): a message leaves
  as soon as it is produced (librdkafka still batches what accumulates while a request to
  the broker is in flight);
- **consumer**: a fetch returns as soon as one byte is there (``fetch.min.bytes`` 1) and the
  broker holds an empty fetch at most ``fetch.wait.max.ms`` (100 ms: what a fetch long-poll
  costs when a partition of the same fetch gets a message, at most).

Nagle's algorithm stays on (librdkafka's default, ``socket.nagle.disable`` false), though
with it a small request written while an earlier one on the same connection is not yet
acknowledged waits for that acknowledgement. Switched off on every client of the path and
the floors together (round 7, load 14-31 on the shared 2-core box, alternated with it on):
cancel-manager's handling of one request (its lock round trip included, median of 400 back
to back) 4.2 / 3.8 ms against 7.7 / 5.7 ms, and ``python -m benchmarks lock``'s
acquire+release p50 1.30x / 1.52x the echo round trip against 1.67x / 1.73x; but the lock's
throughput with one timeline-lock instance fell to 403 / 553 cycles/s from 605 / 713 (one
segment per request where Nagle coalesced the replies of 8 clients), and the cancel
benchmark's ratio did not move beyond its noise. The lock benchmark must not get worse, so
it stays on; a quiet A/B of both benchmarks would settle it.

They are keyword arguments in the form ``KafkaSettings.librdkafka_config`` and our wrappers
take (underscores for dots).
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["LOW_LATENCY_CONSUMER", "LOW_LATENCY_PRODUCER"]

LOW_LATENCY_PRODUCER: Final[dict[str, Any]] = {"linger_ms": 0}
LOW_LATENCY_CONSUMER: Final[dict[str, Any]] = {
    "fetch_wait_max_ms": 100,
    "fetch_min_bytes": 1,
}
