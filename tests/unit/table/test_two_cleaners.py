"""Two ``lakewarden clean`` runs on one table (two processes: each its own coordinator, so no
shared lock). The second finds the first one's clean pending and finishes it as interrupted;
the first, whose own completion then finds the clean completed, reports success with the
clean named in ``CleanResult.already_done`` instead of raising ``IllegalTransitionError``.
Nothing is lost either way: the clean is completed once, its files are gone, the table reads.

The interleaving is deterministic: ``FaultyStorage.before`` runs the second cleaner just
before the first one's ``completed`` reaches the timeline."""

from __future__ import annotations

import pyarrow as pa
from _memstore import MemStorage

from lakewarden.storage.faults import FaultyStorage
from lakewarden.table import CleanPolicy, Table, TableConfig, Transition
from lakewarden.table.config import save_new_config
from lakewarden.table.coordinator import EmbeddedCoordinator
from lakewarden.table.instant import Action

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
POLICY = CleanPolicy(commits_retained=1, retention_window_s=0)


def test_a_cleaner_whose_clean_another_finished_reports_it_done() -> None:
    inner = MemStorage()
    config = TableConfig.new(name="t", record_key="id", schema=SCHEMA)
    save_new_config(inner, config)
    writer = Table(inner, config, coordinator=EmbeddedCoordinator())
    for version in ("v0", "v1", "v2"):
        writer.write(pa.Table.from_pylist([{"id": i, "v": version} for i in range(4)], SCHEMA))
    faulty = FaultyStorage(inner)
    first = Table(faulty, config, coordinator=EmbeddedCoordinator(), actor="cleaner-1")
    second = Table(inner, config, coordinator=EmbeddedCoordinator(), actor="cleaner-2")
    seconds = []

    def the_second_cleaner_runs() -> None:
        seconds.append(second.clean(POLICY))

    # The first cleaner's appends: its clean plan (requested), then its completed.
    faulty.before(
        "write_if_absent", the_second_cleaner_runs, nth=faulty.calls("write_if_absent") + 2
    )
    result = first.clean(POLICY)
    assert faulty.pending() == 0, "the second cleaner did not run"

    assert result.instant is not None and result.already_done == (result.instant,)
    assert seconds[0].resumed == (result.instant,)
    cleans = [i for i in writer.state().instants.values() if i.action is Action.CLEAN]
    assert [c.state for c in cleans] == [Transition.COMPLETED]
    assert set(writer.read().column("v").to_pylist()) == {"v2"}
