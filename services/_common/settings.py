"""What one service process reads from its environment besides ``Settings``, and the name
of its consumer group."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from lakewarden.settings import Settings

__all__ = ["Group", "ServiceSettings", "service_group"]


@dataclass(frozen=True)
class Group:
    """A loop's consumer group: its id, and this instance's static member id (None: dynamic
    membership)."""

    id: str
    instance_id: str | None = None


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

    def group_instance_id(self, service: str) -> str | None:
        """The static member id of this instance of ``service`` (None: dynamic membership)."""
        return f"{service}-{self.instance_id}" if self.instance_id else None

    def group(self, service: str, settings: Settings) -> Group:
        """The consumer group of this instance of ``service``."""
        return Group(service_group(service, settings), self.group_instance_id(service))


def service_group(service: str, settings: Settings) -> str:
    """The consumer group of ``service`` under the settings' topic prefix (also the prefix of
    its changelog topics), so two stacks with different prefixes on one broker never share a
    group or a changelog. The name the faust versions of the services used, so committed
    offsets carry over."""
    return f"{settings.kafka.topic_prefix}{service}"
