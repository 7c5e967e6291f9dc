"""The Liveness view over the running monitor, terminal transitions, the DLQ, health/metrics."""

from __future__ import annotations

from hbtools import Expiries, Writer, hold, new_instant

from lakewarden.clients import KafkaCoordinator
from lakewarden.clients.liveness import Liveness
from lakewarden.events import EventConsumer, EventProducer, make_event
from lakewarden.events.topics import DLQ, HEARTBEATS
from lakewarden.settings import Settings
from lakewarden.table.coordinator import Liveness as Verdict
from lakewarden.testing import wait_until
from lakewarden_services._common.process import ServiceProcess


def wait_for_status(view: Liveness, instant: str, expected: Verdict, timeout_s: float) -> None:
    """Return once the view says ``expected``; ``timeout_s`` guards against a hang (generous:
    it is no speed claim)."""
    wait_until(
        lambda: view.status("t1", instant) is expected,
        timeout_s,
        f"{instant} to be {expected.name}",
    )


def test_view_follows_the_verdicts_and_forgets_finished_instants(
    monitor: ServiceProcess, hb_settings: Settings, expiries: Expiries, writers: list[Writer]
) -> None:
    dying, finishing = new_instant(), new_instant()
    victim = hold(writers, hb_settings, dying)
    hold(writers, hb_settings, finishing)
    with Liveness(hb_settings) as view:
        assert view.status("t1", new_instant()) is Verdict.UNKNOWN
        wait_for_status(view, dying, Verdict.ALIVE, timeout_s=30)
        wait_for_status(view, finishing, Verdict.ALIVE, timeout_s=30)

        victim.kill()
        expiries.wait_for(dying)
        # The record is written right after the expiry is acknowledged.
        wait_for_status(view, dying, Verdict.DEAD, timeout_s=30)
        record = view.record("t1", dying)
        assert record is not None and record.status == "dead"
        coordinator = KafkaCoordinator(hb_settings)  # what table transactions ask
        try:
            assert coordinator.liveness("t1", dying) is Verdict.DEAD
            assert coordinator.liveness("t1", finishing) is Verdict.ALIVE
        finally:
            coordinator.close()

        with EventProducer(hb_settings, producer_id="writer") as producer:
            transition = make_event(
                "TimelineTransition", table_id="t1", producer_id="writer", seq=9,
                instant=finishing, action="commit", transition="completed", actor="writer",
                lock_token=3, wall_time=0, payload="{}",
            )  # fmt: skip
            producer.send("TimelineTransition", transition)
        wait_for_status(view, finishing, Verdict.UNKNOWN, timeout_s=30)  # forgotten
        expiries.settle()  # its writer still beats through a tolerance window: ignored
        assert view.status("t1", finishing) is Verdict.UNKNOWN
        assert finishing not in expiries.by_instant


def test_bad_events_go_to_the_dlq_and_the_monitor_keeps_judging(
    monitor: ServiceProcess, hb_settings: Settings, expiries: Expiries, writers: list[Writer]
) -> None:
    with EventProducer(hb_settings, producer_id="prankster") as producer:
        producer.produce_bytes(HEARTBEATS.name(hb_settings), b"\x00garbage bytes", key=b"t1")
        wrong = make_event(
            "Heartbeat", table_id="t1", producer_id="p", instant="not-an-instant", owner="p",
            interval_ms=500, seq=0,
        )  # fmt: skip
        producer.send("Heartbeat", wrong)
    with EventConsumer(hb_settings, group_id="dlq-reader", topics=[DLQ]) as consumer:
        letters = [e.record for e in consumer.events(idle_timeout_s=30)]
    assert sorted(letter["reason"] for letter in letters) == ["bad_magic", "invalid_event"]
    assert {letter["consumer_group"] for letter in letters} == {
        f"{hb_settings.kafka.topic_prefix}heartbeat-monitor"
    }

    instant = new_instant()
    victim = hold(writers, hb_settings, instant)
    with Liveness(hb_settings) as view:  # the monitor tracks it: its kill is an expiry
        wait_for_status(view, instant, Verdict.ALIVE, timeout_s=30)
    victim.kill()
    expiries.wait_for(instant)

    status, body = monitor.get("/health")
    assert status == 200 and '"status": "ok"' in body
    status, metrics = monitor.get("/metrics")
    assert 'lakewarden_dead_letters_total{reason="bad_magic",service="heartbeat-monitor"} 1.0' in (
        metrics
    )
    assert 'lakewarden_heartbeat_beats_total{kind="tick"}' in metrics
    assert 'lakewarden_heartbeat_instants{status="dead"} 1.0' in metrics
