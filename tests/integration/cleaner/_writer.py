"""A writer process the cleaner tests kill -9 (run as a script, never collected).

    python _writer.py TABLE_URI

Kafka and the heartbeat interval come from the environment. It begins an instant through the
Kafka coordinator (timeline-lock's lease), beats, goes inflight, puts a file at its final key
(as a writer without private staging does), prints ``ready <instant> <key>`` and waits to die.
"""

from __future__ import annotations

import sys
import time

from lakewarden.settings import Settings
from lakewarden.table import Table
from lakewarden.table.files import BaseFileName, WriteToken
from lakewarden.table.stats import WorkloadProfile
from lakewarden.table.transaction import WriteTransaction


def main(uri: str) -> None:
    table = Table.open(uri, settings=Settings())
    txn = WriteTransaction.begin(
        table.timeline_log, table.coordinator, table.table_id, operation="upsert", actor="doomed"
    )
    with txn.heartbeat():
        txn.inflight(WorkloadProfile(operation="upsert"))
        key = BaseFileName("00000000-0000", WriteToken(0, 0, 0), txn.instant).render()
        table.storage.write(key, b"half a parquet file")
        print("ready", txn.instant, key, flush=True)
        time.sleep(3600)


if __name__ == "__main__":
    main(sys.argv[1])
