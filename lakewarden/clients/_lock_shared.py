"""One lock transport per process: every ``LockClient`` of the same Kafka settings shares it.

A transport (``LockIO``) is one confluent-kafka producer, one consumer of one partition of
``lock.replies`` and one IO thread. Giving each client its own cost a process with 8 clients
16 librdkafka clients (each with its own broker threads and fetch loop), 8 IO threads and 8
caller threads contending for one GIL, which reached a fraction of the raw round trips the
same 8 threads make (``python -m benchmarks lock``). Shared, requests of all clients
leave through one producer (librdkafka batches what accumulates while a request is in flight)
and the replies of all of them arrive on one partition, read by one thread that completes each
caller's future by request id.

Clients share a transport when they would build identical ones: same librdkafka
configuration, topic prefix, clock and resend interval. The transport lives while a client
uses it: the last ``detach`` stops it (its thread, its producer's queue, its consumer).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass

from lakewarden.clients._lock_io import LockIO
from lakewarden.clock import Clock
from lakewarden.settings import Settings


@dataclass
class _Shared:
    io: LockIO
    users: int


_guard = threading.Lock()
_transports: dict[str, _Shared] = {}


def transport_key(settings: Settings, *, clock: Clock, resend_s: float) -> str:
    """Which transport a client of these settings uses (a digest: the librdkafka
    configuration may hold a password, which must not sit in a key someone might log)."""
    config = settings.kafka.librdkafka_config()
    described = json.dumps(
        [config, settings.kafka.topic_prefix, id(clock), resend_s], sort_keys=True, default=str
    )
    return hashlib.sha256(described.encode()).hexdigest()


def attach(key: str, connect: Callable[[], LockIO]) -> LockIO:
    """The started transport of ``key``, connected (``connect()``) by its first user.

    Raises: whatever ``connect`` raises (nothing is registered then)."""
    with _guard:
        shared = _transports.get(key)
        if shared is None:
            io = connect()
            io.start()
            shared = _transports[key] = _Shared(io, 0)
        shared.users += 1
        return shared.io


def detach(key: str, io: LockIO) -> None:
    """One user of ``io`` is done; the last one stops it."""
    with _guard:
        shared = _transports.get(key)
        if shared is None or shared.io is not io:
            return
        shared.users -= 1
        if shared.users > 0:
            return
        del _transports[key]
    io.stop()


def transports() -> int:
    """How many transports are running in this process (tests check none is left behind)."""
    with _guard:
        return len(_transports)
