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
acknowledged waits for that acknowledgement. Switching it off shortens a single request's
round trip (cancel-manager's handling, the lock's acquire+release), but it costs the lock's
throughput under many clients: timeline-lock then sends one segment per reply where Nagle
coalesces the replies of several clients. The lock's throughput goal matters more, so it
stays on; ``python -m benchmarks lock`` and ``cancel`` measure both sides of the trade.

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
