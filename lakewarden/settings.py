"""lakewarden configuration: pydantic-settings, nested, typed, ``LAKEWARDEN_`` env prefix.

Nested fields use ``__`` in environment variables, e.g. ``LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS``
or ``LAKEWARDEN_S3__ENDPOINT_URL``. Credentials are ``SecretStr`` so they never appear in logs
or reprs. ``KafkaSettings.librdkafka_config`` is the one place that builds a confluent-kafka
configuration dict.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class KafkaSettings(BaseModel):
    """Where the broker is and how clients talk to it."""

    model_config = ConfigDict(frozen=True)

    bootstrap_servers: str | None = Field(
        default=None,
        description="host:port list; None means no Kafka: tables use the embedded coordinator",
    )
    client_id: str = "lakewarden"
    topic_prefix: str = "lakewarden."
    request_timeout_s: float = 10.0
    # Authentication and encryption, passed to every confluent-kafka client and faust app
    # (LAKEWARDEN_KAFKA__SECURITY_PROTOCOL=SASL_PLAINTEXT, ..._SASL_MECHANISM=PLAIN, ...).
    # The password is a SecretStr: it never appears in a repr, a log, /health or an error.
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_ca_location: str | None = Field(default=None, description="CA bundle (PEM) path")
    job_commits: Literal["service", "embedded"] = Field(
        default="service",
        description="who runs the job commit of a write (Table.write and the Spark driver alike) "
        "with Kafka configured: job-committer (service, the default), or the writing process "
        "itself (embedded; 'writer' is accepted as its former name)",
    )
    job_commit_timeout_s: float = Field(
        default=300.0,
        gt=0,
        description="how long a writer (Table.write, a Spark driver) waits for job-committer's "
        "answer before raising CommitStateUnknownError (the request is durable and may still "
        "complete)",
    )
    job_committer_wait_s: float = Field(
        default=10.0,
        ge=0,
        description="how long a writer (Table.write, a one-shot Spark write) waits for a "
        "job-committer to be a member of its consumer group before raising "
        "JobCommitterUnavailableError (nothing sent, rolled back)",
    )

    @field_validator("job_commits", mode="before")
    @classmethod
    def _former_name(cls, value: object) -> object:
        # "writer" was the opt-out's name before job-committer became the default.
        return "embedded" if value == "writer" else value

    @property
    def enabled(self) -> bool:
        return self.bootstrap_servers is not None

    @property
    def commits_by_service(self) -> bool:
        """Whether job-committer runs a write's job commit: Kafka is configured and
        ``job_commits`` is ``service``. The one decision of the route, for ``Table.write``
        (``KafkaCoordinator.job_commits``) and the Spark driver alike."""
        return self.enabled and self.job_commits == "service"

    def librdkafka_config(self, **overrides: Any) -> dict[str, Any]:
        """The confluent-kafka client configuration; ``overrides`` use librdkafka key names
        with dots replaced by underscores (``enable_idempotence=True``)."""
        if self.bootstrap_servers is None:
            from lakewarden.errors import ConfigurationError

            raise ConfigurationError(
                "Kafka is not configured. Help: set LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS "
                "(for the local stack: 127.0.0.1:9092 after `lakewarden dev up`)."
            )
        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "client.id": self.client_id,
        }
        config.update(self.security_config())
        config.update({key.replace("_", "."): value for key, value in overrides.items()})
        return config

    def security_config(self) -> dict[str, str]:
        """The librdkafka security keys (empty for PLAINTEXT); holds the password in clear:
        hand it to a client, never to a log."""
        config: dict[str, str] = {}
        if self.security_protocol != "PLAINTEXT":
            config["security.protocol"] = self.security_protocol
        if self.sasl_mechanism is not None:
            config["sasl.mechanism"] = self.sasl_mechanism
        if self.sasl_username is not None:
            config["sasl.username"] = self.sasl_username
        if self.sasl_password is not None:
            config["sasl.password"] = self.sasl_password.get_secret_value()
        if self.ssl_ca_location is not None:
            config["ssl.ca.location"] = self.ssl_ca_location
        return config


class S3Settings(BaseModel):
    """An S3-compatible endpoint (SeaweedFS locally, AWS S3 in production).

    Credentials have no default: unset, boto3's credential chain applies (``AWS_*`` variables,
    ``~/.aws``, an instance or pod role). Only the local dev stack has known credentials, and
    it (``lakewarden.devstack``) and the test fixtures pass them explicitly. A Spark write never
    carries them in its options: each process reads them from its own environment
    (``lakewarden.spark._options``).
    """

    model_config = ConfigDict(frozen=True)

    endpoint_url: str | None = None
    region: str = "us-east-1"
    access_key_id: SecretStr | None = None
    secret_access_key: SecretStr | None = None

    @property
    def has_credentials(self) -> bool:
        return self.access_key_id is not None and self.secret_access_key is not None


class HeartbeatPolicy(BaseModel):
    """How often an instant's executor beats, and how many beats may be missed before
    heartbeat-monitor declares it dead (``tolerance_s = interval_s * tolerable_misses``)."""

    model_config = ConfigDict(frozen=True)

    interval_s: float = Field(default=10.0, gt=0)
    tolerable_misses: int = Field(default=3, ge=1)

    @property
    def tolerance_s(self) -> float:
        return self.interval_s * self.tolerable_misses


class HeartbeatSettings(HeartbeatPolicy):
    """Heartbeats: the default policy, per-table overrides, and heartbeat-monitor's knobs.

    ``tables`` maps a table id to its own policy, e.g.
    ``LAKEWARDEN_HEARTBEAT__TABLES='{"orders": {"interval_s": 2, "tolerable_misses": 5}}'``.
    Each beat carries its policy, so the monitor judges an instant by its writer's settings.
    """

    tables: dict[str, HeartbeatPolicy] = Field(default_factory=dict)
    monitor_tick_s: float = Field(
        default=0.2,
        gt=0,
        description="how often heartbeat-monitor stamps every partition with broker time; "
        "deaths are detected up to this much after the tolerance ran out",
    )
    forget_after_s: float = Field(
        default=3600.0,
        gt=0,
        description="how long the monitor remembers an instant declared dead or ended",
    )

    def policy_for(self, table_id: str) -> HeartbeatPolicy:
        """The policy of ``table_id``: its override, else the defaults."""
        override = self.tables.get(table_id)
        if override is not None:
            return override
        return HeartbeatPolicy(interval_s=self.interval_s, tolerable_misses=self.tolerable_misses)


class ErrorTableSettings(BaseModel):
    """The error table (Hudi RFC-20): where rows a write cannot take go, with their context.

    Disabled (the default), a bad row fails the write, naming the row. Enabled, each bad row
    is published as an ``ErrorRecord`` event, left out of the write, and committed by the
    error-table sink into ``<table root><suffix>`` beside the table (local mode), or, when
    ``name`` or ``base_path`` is set, into one global table ``<base_path>/<name>`` (``base_path``
    defaults to the directory holding the table, ``name`` to ``lakewarden_errors``; the suffix
    is then ignored). ``LAKEWARDEN_ERROR_TABLE__ENABLED=true`` turns it on.
    """

    model_config = ConfigDict(frozen=True)

    enabled: bool = False
    suffix: str = Field(default="_errors", min_length=1)
    name: str | None = None
    base_path: str | None = None

    @property
    def is_global(self) -> bool:
        return self.name is not None or self.base_path is not None


class Settings(BaseSettings):
    """Everything a lakewarden client, service or tool can be configured with."""

    model_config = SettingsConfigDict(
        env_prefix="LAKEWARDEN_", env_nested_delimiter="__", frozen=True, extra="ignore"
    )

    kafka: KafkaSettings = KafkaSettings()
    s3: S3Settings = S3Settings()
    heartbeat: HeartbeatSettings = HeartbeatSettings()
    error_table: ErrorTableSettings = ErrorTableSettings()
    state_dir: Path = Field(
        default=Path(".lakewarden-state"),
        description="where the local stack keeps broker data, pid files and logs",
    )
    schema_dir: Path | None = Field(
        default=None,
        description="the event schemas (*.avsc); None: the ones installed with the package "
        "(LAKEWARDEN_SCHEMA_DIR)",
    )
    spark_jars: Path | None = Field(
        default=None,
        description="the folder of Spark's Kafka source jars; None: infra/spark/jars of the "
        "source tree (LAKEWARDEN_SPARK_JARS)",
    )
