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
