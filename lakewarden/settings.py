"""lakewarden configuration: pydantic-settings, nested, typed, ``LAKEWARDEN_`` env prefix.

Nested fields use ``__`` in environment variables, e.g. ``LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS``
or ``LAKEWARDEN_S3__ENDPOINT_URL``. Credentials are ``SecretStr`` so they never appear in logs
or reprs. ``KafkaSettings.librdkafka_config`` is the one place that builds a confluent-kafka
configuration dict.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr
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

    @property
    def enabled(self) -> bool:
        return self.bootstrap_servers is not None

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
        config.update({key.replace("_", "."): value for key, value in overrides.items()})
        return config


class S3Settings(BaseModel):
    """An S3-compatible endpoint (SeaweedFS locally, AWS S3 in production)."""

    model_config = ConfigDict(frozen=True)

    endpoint_url: str | None = None
    region: str = "us-east-1"
    access_key_id: SecretStr = SecretStr("lakewarden")
    secret_access_key: SecretStr = SecretStr("lakewarden")


class Settings(BaseSettings):
    """Everything a lakewarden client, service or tool can be configured with."""

    model_config = SettingsConfigDict(
        env_prefix="LAKEWARDEN_", env_nested_delimiter="__", frozen=True, extra="ignore"
    )

    kafka: KafkaSettings = KafkaSettings()
    s3: S3Settings = S3Settings()
    state_dir: Path = Field(
        default=Path(".lakewarden-state"),
        description="where the local stack keeps broker data, pid files and logs",
    )
