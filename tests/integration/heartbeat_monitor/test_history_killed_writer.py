"""`lakewarden explain` on a writer killed with kill -9: real broker, real heartbeat-monitor,
a real writer process beating for an instant whose entries are announced on the timeline topic.

There is no cleaner service yet, so the test first explains the instant while it is still
pending (expired, not rolled back), then appends ``rolled_back`` itself, as the cleaner will.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pyarrow as pa
from click.testing import CliRunner, Result
from hbtools import INTERVAL_S, Expiries, Writer, hold
from matplotlib.image import imread

from lakewarden.api.table import Table
from lakewarden.cli import cli
from lakewarden.clients.timeline_events import TimelinePublisher
from lakewarden.history import fmt_ms
from lakewarden.history.chart import BAR_COLOURS
from lakewarden.settings import Settings
from lakewarden.table.coordinator import EmbeddedCoordinator
from lakewarden.table.stats import WorkloadProfile
from lakewarden.table.timeline_state import TimelineEntry
from lakewarden.table.transaction import WriteTransaction
from lakewarden_services._common.process import ServiceProcess

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False)])


class _AnnouncingCoordinator(EmbeddedCoordinator):
    """The in-process lock, with every appended entry announced on the timeline topic (what
    the Kafka coordinator does), so no lock service is needed here."""

    def __init__(self, publisher: TimelinePublisher) -> None:
        super().__init__()
        self.publisher = publisher

    def announce(self, table_id: str, entry: TimelineEntry) -> None:
        self.publisher.publish(table_id, entry)


def run(settings: Settings, *args: str) -> Result:
    env = {
        "LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS": str(settings.kafka.bootstrap_servers),
        "LAKEWARDEN_KAFKA__TOPIC_PREFIX": settings.kafka.topic_prefix,
    }
    return CliRunner().invoke(cli, list(args), env=env)


def test_explain_names_the_killed_writer_its_last_beat_and_the_missed_beats(
    hb_settings: Settings,
    monitor: ServiceProcess,
    expiries: Expiries,
    writers: list[Writer],
    tmp_path: Path,
) -> None:
    table = Table.create(
        str(tmp_path / "orders"),
        name="orders",
        record_key="id",
        schema=SCHEMA,
        coordinator=EmbeddedCoordinator(),
    )
    publisher = TimelinePublisher(hb_settings)
    coordinator = _AnnouncingCoordinator(publisher)
    txn = WriteTransaction.begin(
        table.timeline_log, coordinator, table.table_id, operation="insert", actor="writer"
    )
    txn.inflight(WorkloadProfile(operation="insert", file_groups=()))
    writer = hold(writers, hb_settings, txn.instant, table=table.table_id)
    time.sleep(4 * INTERVAL_S)  # a few beats
    writer.kill()
    expired = expiries.wait_for(txn.instant)

    pending = run(hb_settings, "explain", table.uri, txn.instant)
    txn.rollback("heartbeat of writer expired")  # the cleaner's step
    rolled_back = run(hb_settings, "explain", table.uri, txn.instant)
    replay = run(hb_settings, "replay", table.uri)
    page = run(hb_settings, "chart", table.uri, "--out", str(tmp_path / "history.html"))
    image = run(hb_settings, "chart", table.uri, "--out", str(tmp_path / "history.png"))
    publisher.close()

    stopped = (
        f"writer writer's heartbeat stopped at {fmt_ms(expired['last_seen_ms'])} (broker time)"
    )
    assert pending.exit_code == 0, pending.output
    assert "is inflight" in pending.output and "still pending" in pending.output
    assert f"Not rolled back yet, although {stopped}: " in pending.output
    assert rolled_back.exit_code == 0, rolled_back.output
    assert f"Rolled back because {stopped}: " in rolled_back.output
    assert "beats missed (interval 500 ms, 3 tolerated)" in rolled_back.output
    assert f"declared it dead at {fmt_ms(expired['detected_ms'])}" in rolled_back.output
    assert "reason recorded: heartbeat of writer expired" in rolled_back.output
    assert replay.exit_code == 0, replay.output
    assert replay.output.rstrip().endswith("no difference")
    assert page.exit_code == 0 and image.exit_code == 0, page.output + image.output
    html = (tmp_path / "history.html").read_text()
    assert "heartbeat of writer declared dead by heartbeat-monitor" in html
    assert f"{txn.instant} commit (rolled_back)" in html
    rgb = np.round(imread(str(tmp_path / "history.png"))[..., :3] * 255).astype(int)
    for kind in ("inflight", "heartbeats", "gap"):  # the beats, then the silence to the expiry
        wanted = tuple(int(BAR_COLOURS[kind][i : i + 2], 16) for i in (1, 3, 5))
        assert np.any(np.all(rgb == wanted, axis=-1)), f"no {kind} bar in the chart"
