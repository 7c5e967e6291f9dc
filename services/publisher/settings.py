"""What a publisher process reads from its environment (``LAKEWARDEN_PUBLISHER_*``)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class PublisherSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="LAKEWARDEN_PUBLISHER_", frozen=True, extra="ignore"
    )

    # Every owned table is synced at least this often (events publish sooner).
    sweep_interval_s: float = Field(default=30.0, gt=0)
    # Tables synced at once (one table is never synced by two at once): a sync mostly waits
    # on storage (an fsync of the version and of its directory locally, requests on S3), so
    # syncs of different tables overlap; one at a time they are bounded by that latency.
    concurrency: int = Field(default=8, ge=1)
