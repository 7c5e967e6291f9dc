"""The demo's writer that is killed mid-batch (run as ``python -m lakewarden._demo_writer``).

    python -m lakewarden._demo_writer TABLE_URI

Opens an instant on the table through the configured coordinator (``LAKEWARDEN_KAFKA__*``:
timeline-lock's lease and token, heartbeats to heartbeat-monitor), appends ``inflight``,
prints ``ready <instant>`` once it is beating, and then works on its batch forever: the demo
kills it with SIGKILL, and heartbeat-monitor declares the instant dead one tolerance window
after its last beat. The heartbeat policy comes from ``LAKEWARDEN_HEARTBEAT__*``.
"""

from __future__ import annotations

import sys
import time

from lakewarden.api.table import Table
from lakewarden.settings import Settings
from lakewarden.table.stats import WorkloadProfile
from lakewarden.table.transaction import WriteTransaction

ACTOR = "demo-writer"


def main(uri: str) -> None:
    table = Table.open(uri, settings=Settings())
    txn = WriteTransaction.begin(
        table.timeline_log, table.coordinator, table.table_id, operation="insert", actor=ACTOR
    )
    with txn.heartbeat():
        txn.inflight(WorkloadProfile(operation="insert", file_groups=()))
        print(f"ready {txn.instant}", flush=True)
        while True:  # "writing its batch" until killed
            time.sleep(1)


if __name__ == "__main__":
    main(sys.argv[1])
