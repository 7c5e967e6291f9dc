"""The faust app of a service, built from ``Settings``, and the per-process service settings.

Every service app gets the same choices, made once here:

- app id (= consumer group, prefix of its changelog topics) ``<topic prefix><service>``, so
  two stacks with different prefixes on one broker never share a group or a changelog;
- tables in memory, recovered from their changelog at start (``memory://``), no standby
  replicas (a table partition lives in exactly one process), changelog partitions equal to the
  source topic's (tables are partitioned like the events that change them);
- durable producer (``acks=all``), no linger (services answer clients that wait);
- offsets committed every ``commit_interval_s`` (default 1 s; faust flushes the producer, so
  the changelog, first);
- faust's own web server off: ``HealthServer`` serves health and metrics on 127.0.0.1;
- a 6 s session timeout (the broker's minimum) instead of faust's 60 s, so the group notices a
  killed instance soon;
  with ``instance_id`` (static membership) a restarted instance takes its partitions back at
  once, without waiting for that timeout.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import faust
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from lakewarden.events.faust_codec import CODEC_NAME  # importing it registers the codec
from lakewarden.events.topics import TopicSpec
from lakewarden.settings import Settings

# Where a faust app without a configured broker points: construction never connects, so unit
# tests can import a service module; running it needs LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS.
_NO_BROKER = "kafka://127.0.0.1:9"


class ServiceSettings(BaseSettings):
    """What one service process reads from its environment besides ``Settings``."""

    model_config = SettingsConfigDict(env_prefix="LAKEWARDEN_", frozen=True, extra="ignore")

    health_port: int = Field(
        default=0, description="port of /health and /metrics on 127.0.0.1; 0: a free port"
    )
    instance_id: str | None = Field(
        default=None,
        description="static group membership: a restarted instance takes its partitions back "
        "at once",
    )
    log_level: str = Field(default="INFO", description="threshold of the logfmt log on stderr")
    # Longer: less commit traffic, more redelivered events after a crash (handlers are
    # idempotent either way).
    commit_interval_s: float = Field(
        default=1.0, description="how often consumed offsets are committed"
    )


def app_id(service: str, settings: Settings) -> str:
    """The faust app id (and consumer group) of ``service`` under the settings' prefix."""
    return f"{settings.kafka.topic_prefix}{service}"


def broker_urls(settings: Settings) -> list[str]:
    """``kafka://host:port`` for each bootstrap server (a placeholder when none is set)."""
    servers = settings.kafka.bootstrap_servers
    if not servers:
        return [_NO_BROKER]
    return [f"kafka://{server.strip()}" for server in servers.split(",") if server.strip()]


def make_app(
    service: str,
    settings: Settings,
    *,
    partitions: int,
    instance_id: str | None = None,
    commit_interval_s: float = 1.0,
    **overrides: Any,
) -> faust.App:
    """The faust app of ``service``; ``partitions`` is the partition count of the topics its
    tables are keyed like. ``overrides`` are faust settings that win over these defaults."""
    datadir = Path(settings.state_dir) / "faust" / service
    config: dict[str, Any] = {
        "broker": broker_urls(settings),
        "autodiscover": False,
        "datadir": str(datadir),
        "store": "memory://",
        "topic_partitions": partitions,
        "topic_replication_factor": 1,
        "table_standby_replicas": 0,
        "producer_acks": -1,
        "producer_linger": 0.0,
        "broker_commit_interval": commit_interval_s,
        "broker_session_timeout": 6.0,
        "broker_heartbeat_interval": 1.0,
        "consumer_auto_offset_reset": "earliest",
        "web_enabled": False,
    }
    if instance_id:
        config["consumer_group_instance_id"] = f"{service}-{instance_id}"
    credentials = broker_credentials(settings)
    if credentials is not None:
        config["broker_credentials"] = credentials
    config.update(overrides)
    return faust.App(app_id(service, settings), **config)


def broker_credentials(settings: Settings) -> faust.types.auth.CredentialsT | None:
    """faust's form of ``settings.kafka``'s security settings (the same ones every
    confluent-kafka client gets through ``librdkafka_config``); None for PLAINTEXT."""
    kafka = settings.kafka
    protocol = kafka.security_protocol
    context = None
    if protocol in ("SSL", "SASL_SSL"):
        context = ssl.create_default_context(cafile=kafka.ssl_ca_location)
    if protocol.startswith("SASL_"):
        return faust.SASLCredentials(
            username=kafka.sasl_username,
            password=None
            if kafka.sasl_password is None
            else kafka.sasl_password.get_secret_value(),
            ssl_context=context,
            mechanism=kafka.sasl_mechanism or "PLAIN",
        )
    if context is not None:
        return faust.SSLCredentials(context)
    return None


def event_topic(app: faust.App, spec: TopicSpec, settings: Settings) -> Any:
    """``spec``'s topic in ``app``: raw keys (the table id), values in lakewarden's single-object
    Avro encoding, the way every lakewarden producer writes them."""
    return app.topic(spec.name(settings), key_serializer="raw", value_serializer=CODEC_NAME)
