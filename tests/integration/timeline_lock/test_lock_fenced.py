"""A loop service whose consumer is fenced (librdkafka's fatal error for a static member that
another consumer with the same ``group.instance.id`` replaced; seen after a broker restart)
builds its loop again and serves, instead of polling a dead consumer forever."""

from __future__ import annotations

import json
import time

from confluent_kafka import Consumer

from lakewarden.clients import LockClient
from lakewarden.settings import Settings
from lakewarden.testing import wait_until
from lakewarden_services._common.process import ServiceProcess
from lakewarden_services.timeline_lock.handler import SERVICE


def test_a_fenced_loop_service_builds_its_loop_again_and_grants(
    lock_settings: Settings, lock_service: ServiceProcess, make_client: type[LockClient]
) -> None:
    client = make_client(lock_settings)
    assert client.release(client.acquire("fenced", ttl_s=5, wait_s=30), wait_s=10)
    # The service runs with static membership (ServiceProcess's instance id "0"): a consumer
    # joining its group under the same instance id fences the service's consumer.
    intruder = Consumer(
        lock_settings.kafka.librdkafka_config(
            group_id=f"{lock_settings.kafka.topic_prefix}{SERVICE}",
            group_instance_id=f"{SERVICE}-0",
            enable_auto_commit=False,
        )
    )
    try:
        intruder.subscribe([f"{lock_settings.kafka.topic_prefix}lock.requests"])
        deadline = time.monotonic() + 60
        while not intruder.assignment() and time.monotonic() < deadline:
            intruder.poll(0.2)
        assert intruder.assignment(), "the intruder never took the service's place"
    finally:
        intruder.close()  # a static member leaves without a rebalance: the service rejoins
    wait_until(lambda: _rebuilds(lock_service) >= 1, 60, "the service built its loop again")
    wait_until(lambda: lock_service.get("/health")[0] == 200, 120, "healthy after the rebuild")
    lease = client.acquire("fenced", ttl_s=5, wait_s=60)
    assert lease.token == 2  # the lock's state came back from the changelog
    assert client.release(lease, wait_s=10)


def _rebuilds(service: ServiceProcess) -> int:
    status, body = service.get("/health")
    return int(json.loads(body).get("rebuilds", 0))
