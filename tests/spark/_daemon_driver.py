"""A session from ``ingest_session`` in a process of its own, for ``test_daemon`` (a session's
daemon is fixed when it starts, so the tests' shared session cannot show it)::

    python _daemon_driver.py [<spark.python.daemon.module>]

With an argument, the session is given that daemon in ``ingest_session``'s ``conf``. Runs one
task per local core and prints, as one JSON line, what each task's Python worker found at the
start of its task: the command line of the process that forked it (the daemon), whether
lakewarden's task code was imported already, and how many objects its garbage collector skips
as frozen (``gc.get_freeze_count``). The probe references no lakewarden module, so
unpickling it imports none.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from lakewarden.spark.daemon import DAEMON_OPTION  # noqa: E402
from lakewarden.spark.ingest import ingest_session  # noqa: E402

TASKS = 2


def probe(_: Any) -> Any:
    import gc
    import os
    import sys

    with open(f"/proc/{os.getppid()}/cmdline", "rb") as cmdline:
        parent = cmdline.read().replace(b"\0", b" ").decode().strip()
    yield {
        "parent": parent,
        "task_code_imported": "lakewarden.spark._task" in sys.modules,
        "frozen": gc.get_freeze_count(),
    }


def main() -> None:
    conf = {DAEMON_OPTION: sys.argv[1]} if len(sys.argv) > 1 else None
    spark = ingest_session(master=f"local[{TASKS}]", jars=[], conf=conf)
    try:
        found = spark.sparkContext.parallelize(range(TASKS), TASKS).mapPartitions(probe).collect()
    finally:
        spark.stop()
    print(json.dumps(found))


if __name__ == "__main__":
    main()
