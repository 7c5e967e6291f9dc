"""The composition root: one factory builds the coordinator from settings; library code is
handed it; services refuse to run without Kafka; settings hold no default S3 credentials."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from lakewarden.errors import ConfigurationError
from lakewarden.settings import HeartbeatSettings, KafkaSettings, Settings
from lakewarden.table import (
    EmbeddedCoordinator,
    Table,
    connect,
    load_coordinator,
    shared_connection,
)

NO_KAFKA = Settings(kafka=KafkaSettings())
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False)])


def test_without_kafka_the_factory_builds_an_embedded_coordinator() -> None:
    with connect(NO_KAFKA) as connection:
        assert isinstance(connection.coordinator, EmbeddedCoordinator)
    assert load_coordinator(NO_KAFKA) is not load_coordinator(NO_KAFKA)  # the caller owns it


def test_the_embedded_coordinator_counts_claims_by_the_configured_heartbeat_policy() -> None:
    """A plan's claim mark holds it for the heartbeat policy's tolerance (interval x misses):
    the embedded coordinator used the default 30 s whatever the settings said, so a killed
    executor's plan stayed unclaimable for 30 s in a process configured for 2 s."""
    tight = HeartbeatSettings(
        interval_s=0.5,
        tolerable_misses=4,
        tables={"slow": {"interval_s": 5, "tolerable_misses": 2}},  # type: ignore[dict-item]
    )
    coordinator = load_coordinator(Settings(kafka=KafkaSettings(), heartbeat=tight))
    assert coordinator.heartbeat_tolerance_s("orders") == 2.0
    assert coordinator.heartbeat_tolerance_s("slow") == 10.0
    assert load_coordinator(NO_KAFKA).heartbeat_tolerance_s("orders") == 30.0


def test_a_service_connection_without_kafka_is_refused_with_help() -> None:
    with pytest.raises(ConfigurationError, match="Help: set LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS"):
        connect(NO_KAFKA, require_kafka=True)


def test_table_requires_a_coordinator_and_the_conveniences_take_the_shared_one(
    tmp_path: Path,
) -> None:
    uri = str(tmp_path / "t")
    created = Table.create(uri, name="t", record_key="id", schema=SCHEMA, settings=NO_KAFKA)
    shared = shared_connection(NO_KAFKA).coordinator
    assert created.coordinator is shared
    assert Table.open(uri, settings=NO_KAFKA).coordinator is shared
    own = EmbeddedCoordinator()
    assert Table.open(uri, coordinator=own).coordinator is own
    with pytest.raises(TypeError):
        Table(created.storage, created.config)  # type: ignore[call-arg]


def test_settings_have_no_default_s3_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("LAKEWARDEN_S3__ACCESS_KEY_ID", "LAKEWARDEN_S3__SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)
    s3 = Settings().s3
    assert s3.access_key_id is None and s3.secret_access_key is None  # boto3's chain applies
    assert not s3.has_credentials


def test_former_raw_environment_reads_are_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from lakewarden_services.error_sink.__main__ import SinkSettings

    monkeypatch.setenv("LAKEWARDEN_SCHEMA_DIR", str(tmp_path / "schemas"))
    monkeypatch.setenv("LAKEWARDEN_SPARK_JARS", str(tmp_path / "jars"))
    monkeypatch.setenv("LAKEWARDEN_ERROR_SINK_CHECK_INTERVAL_S", "0.3")
    settings = Settings()
    assert settings.schema_dir == tmp_path / "schemas"
    assert settings.spark_jars == tmp_path / "jars"
    assert SinkSettings().check_interval_s == 0.3


@pytest.mark.parametrize(
    "service",
    [
        "error_sink",
        "job_committer",
        "timeline_lock",
        "heartbeat_monitor",
        "cleaner",
        "cancel_manager",
        "publisher",
    ],
)
def test_every_service_refuses_to_start_without_kafka(tmp_path: Path, service: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKEWARDEN_")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    done = subprocess.run(
        [sys.executable, "-m", f"services.{service}"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "Kafka is not configured" in done.stderr and "Help:" in done.stderr
