"""What a cleaner process reads from its environment (``LAKEWARDEN_CLEANER_*``)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class CleanerSettings(BaseSettings):
    """The sweep interval and the test and benchmark hooks (all off by default)."""

    model_config = SettingsConfigDict(env_prefix="LAKEWARDEN_CLEANER_", frozen=True, extra="ignore")

    sweep_interval_s: float = Field(
        default=60.0,
        gt=0,
        description="every owned table is cleaned at least this often (events clean sooner)",
    )
    store_latency_ms: float = Field(
        default=0.0,
        ge=0,
        description="benchmarks only: a store this slow per call (a remote object store)",
    )
    delete_delay_s: float = Field(
        default=0.0,
        ge=0,
        description="tests only: each delete takes this long, so a process can be killed "
        "in the middle of a clean",
    )
