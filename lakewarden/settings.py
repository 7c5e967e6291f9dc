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
    client_id: str = Field(default="lakewarden", description="Kafka client.id of every client")
    topic_prefix: str = Field(
        default="lakewarden.",
        description="prefix of every topic and consumer group; one prefix per deployment",
    )
    request_timeout_s: float = Field(
        default=10.0, description="how long a client waits for a broker's answer"
    )
    # Authentication and encryption, passed to every confluent-kafka client
    # (LAKEWARDEN_KAFKA__SECURITY_PROTOCOL=SASL_PLAINTEXT, ..._SASL_MECHANISM=PLAIN, ...).
    # The password is a SecretStr: it never appears in a repr, a log, /health or an error.
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        default="PLAINTEXT", description="how clients connect to the brokers"
    )
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = Field(
        default=None, description="SASL mechanism, with a SASL_* security protocol"
    )
    sasl_username: str | None = Field(default=None, description="SASL user name")
    sasl_password: SecretStr | None = Field(
        default=None, description="SASL password; never shown in a repr, log, /health or error"
    )
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

    endpoint_url: str | None = Field(
        default=None,
        description="S3 endpoint (SeaweedFS, MinIO ...); unset: AWS S3's endpoint for the region",
    )
    region: str = Field(default="us-east-1", description="S3 region")
    access_key_id: SecretStr | None = Field(
        default=None, description="access key; unset: boto3's credential chain"
    )
    secret_access_key: SecretStr | None = Field(
        default=None, description="secret key; unset: boto3's credential chain"
    )

    @property
    def has_credentials(self) -> bool:
        return self.access_key_id is not None and self.secret_access_key is not None


class HeartbeatPolicy(BaseModel):
    """How often an instant's executor beats, and how many beats may be missed before
    heartbeat-monitor declares it dead (``tolerance_s = interval_s * tolerable_misses``)."""

    model_config = ConfigDict(frozen=True)

    interval_s: float = Field(default=10.0, gt=0, description="seconds between two beats")
    tolerable_misses: int = Field(
        default=3,
        ge=1,
        description="beats that may be missed before the instant is declared dead",
    )

    @property
    def tolerance_s(self) -> float:
        return self.interval_s * self.tolerable_misses


class HeartbeatSettings(HeartbeatPolicy):
    """Heartbeats: the default policy, per-table overrides, and heartbeat-monitor's knobs.

    ``tables`` maps a table id to its own policy, e.g.
    ``LAKEWARDEN_HEARTBEAT__TABLES='{"orders": {"interval_s": 2, "tolerable_misses": 5}}'``.
    Each beat carries its policy, so the monitor judges an instant by its writer's settings.
    """

    tables: dict[str, HeartbeatPolicy] = Field(
        default_factory=dict,
        description="per-table policies as JSON, e.g. "
        '{"orders": {"interval_s": 2, "tolerable_misses": 5}}',
    )
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

    enabled: bool = Field(
        default=False,
        description="set bad rows aside in the error table instead of failing the write",
    )
    suffix: str = Field(
        default="_errors",
        min_length=1,
        description="a table's own error table is <table root><suffix> (local mode)",
    )
    name: str | None = Field(
        default=None,
        description="one global error table of this name for every table "
        "(default name when base_path is set: lakewarden_errors)",
    )
    base_path: str | None = Field(
        default=None,
        description="where the global error table lives (default: the directory holding the table)",
    )

    @property
    def is_global(self) -> bool:
        return self.name is not None or self.base_path is not None


class CommitterSettings(BaseModel):
    """The manifest committer's options a user sets (Hadoop's ``io.threads``,
    ``validate.output`` and ``cleanup.skipped``); None leaves the committer's default.

    The same value travels in a Spark write's options (``committer.threads``, ...) and in
    ``JobCommitRequest`` to job-committer, where a value the request sets wins over the
    service's own settings (``merged``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    threads: int | None = Field(
        default=None,
        ge=1,
        le=256,
        description="store I/O threads of a job commit, its cleanup and abort; None: 32 on an "
        "object store, 4 on the local filesystem's fast path",
    )
    validate_output: bool | None = Field(
        default=None,
        description="after placing the files, check every committed file's size, and its "
        "etag where the store reports one (S3); a mismatch fails the job commit. "
        "None: off (one stat per file)",
    )
    cleanup: bool | None = Field(
        default=None,
        description="delete the job's _temporary/manifest_<job> directory after the commit; "
        "false keeps it (manifests, commit plan) for diagnosis. None: on",
    )

    summary_report_directory: str | None = Field(
        default=None,
        description="a directory (path or URI) that also receives every job's _SUCCESS "
        "summary, committed or failed, as summary-<jobId>.json. Not carried to job-committer: "
        "the service writes where its own settings say",
    )
    diagnostics_manifest_directory: str | None = Field(
        default=None,
        description="a directory (path or URI) that receives a copy of the manifests each job "
        "commit loads, under <jobId>/. Not carried to job-committer either",
    )

    def merged(self, override: CommitterSettings | None) -> CommitterSettings:
        """These settings with every value ``override`` sets replacing this one's."""
        if override is None:
            return self
        return self.model_copy(update=override.model_dump(exclude_none=True))

    @property
    def is_default(self) -> bool:
        return all(value is None for value in self.model_dump().values())

    def for_request(self) -> dict[str, object] | None:
        """The values a ``JobCommitRequest`` carries to job-committer (never the report
        directories: a request must not make the service write where it names); None when
        none is set."""
        carried = self.model_dump(include={"threads", "validate_output", "cleanup"})
        return carried if any(v is not None for v in carried.values()) else None


class Settings(BaseSettings):
    """Everything a lakewarden client, service or tool can be configured with."""

    model_config = SettingsConfigDict(
        env_prefix="LAKEWARDEN_", env_nested_delimiter="__", frozen=True, extra="ignore"
    )

    kafka: KafkaSettings = KafkaSettings()
    s3: S3Settings = S3Settings()
    heartbeat: HeartbeatSettings = HeartbeatSettings()
    error_table: ErrorTableSettings = ErrorTableSettings()
    committer: CommitterSettings = CommitterSettings()
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
