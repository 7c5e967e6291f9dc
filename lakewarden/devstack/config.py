"""Settings of the local dev stack, from ``LAKEWARDEN_DEV__*`` environment variables.

They are separate from :class:`lakewarden.settings.Settings` because only the stack command
and the test fixtures read them; clients and services only need where things run
(``LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS`` ...), which the stack hands to the services it starts.
A port of 0 means "pick a free ephemeral port at start" (what the tests use).
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class DevSettings(BaseSettings):
    """Ports and sizes of ``lakewarden dev up``; every field is overridable by a CLI option."""

    model_config = SettingsConfigDict(env_prefix="LAKEWARDEN_DEV__", frozen=True, extra="ignore")

    kafka_port: int = Field(default=9092, ge=0, le=65535, description="the broker's port")
    kafka_controller_port: int = Field(
        default=9093, ge=0, le=65535, description="the KRaft controller's port"
    )
    kafka_heap: str = Field(
        default="512m", pattern=r"^\d+[kmgKMG]$", description="the broker JVM's heap (-Xmx)"
    )
    s3_port: int = Field(
        default=8333, ge=0, le=65535, description="SeaweedFS's S3 port (with --s3)"
    )
    bucket: str = Field(default="lakewarden", description="the bucket created on S3")
    startup_timeout_s: float = Field(
        default=90.0, gt=0, description="how long each part may take to become healthy"
    )
    brokers: int = Field(
        default=1,
        ge=1,
        le=5,
        description="Kafka nodes; 3 runs a KRaft cluster of three broker+controller nodes "
        "(topics replicated 3 times, min.insync.replicas=2), the extra nodes on free ports",
    )
