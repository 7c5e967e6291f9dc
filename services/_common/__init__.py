"""What every lakewarden service shares: the health and metrics endpoint, logfmt logging,
dead-lettering of bad events, the process runner and the Kafka loop's scaffolding.

A service is a package ``services/<name>/``, laid out the same way in all of them:

- ``app.py``: its declarations (settings, topics, consumer group), no IO at import;
- ``loop.py``: its runtime, a plain confluent-kafka loop (``loop_service``: one consumer in
  a group, offsets committed by hand after the work they cover is durable, one idempotent
  producer; ``table_loop`` for the services that own tables);
- ``handler.py``: what to do with one decoded event, tested without Kafka;
- ``protocol.py``: its events, parsed and built;
- ``worker.py``: the blocking work (storage, the table lock);
- ``__main__.py``: runs it until SIGTERM (``loop_service.serve_loop``);

and one ``ServiceSpec`` line in ``lakewarden/devstack/services.py``. State that must survive
a restart or a rebalance is in storage or in compacted changelogs read back on assignment
(``changelog``, ``registry``).

Why plain loops and not faust, which most services ran on before: a client waits on the
answers of timeline-lock, cancel-manager and job-committer, and each of faust's hops (aiokafka's
fetcher, an agent's queue, a worker thread, aiokafka's sender) cost about a Kafka round trip;
heartbeat-monitor's stream is high-rate, and faust spent several times the CPU of librdkafka's
batched consume per message; faust's table recovery could wait forever for a changelog
partition after a broker restart, and a registration could be lost across a rebalance. A loop
commits offsets only once the work they cover is durable, reads its changelogs back in one
bounded read, and is built again when its consumer fails fatally.
"""

from lakewarden_services._common.dlq import DeadLetters
from lakewarden_services._common.health import HealthServer
from lakewarden_services._common.logs import setup_logging
from lakewarden_services._common.settings import ServiceSettings, service_group

__all__ = [
    "DeadLetters",
    "HealthServer",
    "ServiceSettings",
    "service_group",
    "setup_logging",
]
