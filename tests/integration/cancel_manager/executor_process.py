"""A table-service executor process for the cancel-manager tests (a script, never collected).

    python executor_process.py TABLE_URI INSTANT pause   claim, rewrite, print "ready", hang
    python executor_process.py TABLE_URI INSTANT run     run the plan; print the outcome

Kafka and heartbeat settings come from the environment (``LAKEWARDEN_*``): the table lock is
timeline-lock's and the heartbeats go to heartbeat-monitor, as in production.
"""

from __future__ import annotations

import sys
import time
from typing import ClassVar

from lakewarden.errors import LakewardenError
from lakewarden.settings import Settings
from lakewarden.table import Table, connect
from lakewarden.table.instant import Action
from lakewarden.table.stats import CommitStats
from lakewarden.tableservice import ClusteringStrategy, RewriteJob, register_strategy


class _PausingClustering(ClusteringStrategy):
    name: ClassVar[str] = "clustering.bucket"
    action: ClassVar[Action] = Action.CLUSTERING

    def rewrite(self, job: RewriteJob) -> CommitStats:
        stats = super().rewrite(job)
        print("ready", flush=True)
        time.sleep(3600)  # the test kills this process (kill -9) while it beats
        return stats


def main(uri: str, instant: str, mode: str) -> None:
    if mode == "pause":
        register_strategy("clustering.bucket", lambda plan: _PausingClustering())
    settings = Settings()
    table = Table.open(uri, coordinator=connect(settings).coordinator, settings=settings)
    table.actor = f"executor-{mode}"
    try:
        run = table.run_table_service(instant)
        print(f"outcome {run.outcome}", flush=True)
    except LakewardenError as err:
        print(f"refused {type(err).__name__}", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
