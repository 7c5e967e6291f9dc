"""A job committer process killed with SIGKILL in the middle of its renames; another process
(here: this one, with a fresh committer) resumes and ends with exactly the accepted files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from _commit_helpers import Table, expected, job_files, run_task

from lakewarden.commit import CommitterOptions
from lakewarden.testing import wait_until

_CHILD = textwrap.dedent(
    """
    import json, sys, threading
    from lakewarden.commit import CommitterOptions, ManifestCommitter
    from lakewarden.storage.faults import FaultyStorage
    from lakewarden.storage.local import LocalStorage

    root, job_id, accepted, marker = (
        sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
    )

    class StallsMidway(FaultyStorage):
        \"\"\"Renames until 40 files are placed, then says so and stalls every rename
        thread: the parent kills it there, in the middle whatever the machine's load (a
        wrapped store, so the committer renames through it, not by its local fast path).\"\"\"

        placed = 0
        guard = threading.Lock()

        def rename(self, src, dst):
            super().rename(src, dst)
            with self.guard:
                type(self).placed += 1
                if type(self).placed == 40:
                    open(marker, "w").close()
                stall = type(self).placed >= 40
            if stall:
                threading.Event().wait()

    committer = ManifestCommitter(
        StallsMidway(LocalStorage(root)), job_id, options=CommitterOptions(threads=4, batch_size=10)
    )
    committer.commit_job(accepted)
    print("finished")
    """
)


def test_sigkill_mid_rename_then_resume_in_another_process(
    local_table: Table, tmp_path: Path
) -> None:
    table = local_table
    committer = table.committer(options=CommitterOptions(threads=4))
    committer.setup_job()
    files = job_files(tasks=10, per_task=40)  # 400 files
    accepted = [run_task(committer, t, 0, f).attempt_id for t, f in files.items()]
    run_task(committer, 0, 1, {"p=0/loser.parquet": b"never accepted"})
    root = os.path.dirname(table.storage.local_path("x") or "")
    marker = str(tmp_path / "placed-40")
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _CHILD,
            root,
            committer.job_id,
            json.dumps([str(a) for a in accepted]),
            marker,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_until(
            lambda: os.path.exists(marker) or child.poll() is not None,
            timeout_s=60,
            what="the child placed 40 files",
        )
        # Ended on its own (it stalls at 40 files): its stderr says why.
        assert child.poll() is None, child.communicate()[1].decode()
        os.kill(child.pid, signal.SIGKILL)
    finally:
        _, stderr = child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL, stderr.decode()
    placed = len(table.data_files())
    assert 40 <= placed <= 43, placed  # killed in the middle: 40, up to 3 more by other threads
    result = table.committer(committer.job_id).commit_job(accepted)
    assert table.data_files() == expected(files)
    assert result.resumed and result.already_done >= placed
    assert result.placed + result.already_done == 400
    assert [k for k in table.all_keys() if k.startswith("_temporary/")] == []
