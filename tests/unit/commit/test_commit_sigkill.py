"""A job committer process killed with SIGKILL in the middle of its renames; another process
(here: this one, with a fresh committer) resumes and ends with exactly the accepted files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

from _commit_helpers import Table, expected, job_files, run_task

from lakewarden.commit import CommitterOptions

_CHILD = textwrap.dedent(
    """
    import json, sys
    from lakewarden.commit import CommitterOptions, ManifestCommitter
    from lakewarden.storage.faults import FaultyStorage
    from lakewarden.storage.local import LocalStorage

    root, job_id, accepted = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    # 5 ms per rename: slow enough to be killed in the middle
    slow = FaultyStorage(LocalStorage(root), latency_s=0.005, latency_ops=["rename"])
    committer = ManifestCommitter(
        slow, job_id, options=CommitterOptions(threads=4, batch_size=10)
    )
    committer.commit_job(accepted)
    print("finished")
    """
)


def test_sigkill_mid_rename_then_resume_in_another_process(local_table: Table) -> None:
    table = local_table
    committer = table.committer(options=CommitterOptions(threads=4))
    committer.setup_job()
    files = job_files(tasks=10, per_task=40)  # 400 files
    accepted = [run_task(committer, t, 0, f).attempt_id for t, f in files.items()]
    run_task(committer, 0, 1, {"p=0/loser.parquet": b"never accepted"})
    root = os.path.dirname(table.storage.local_path("x") or "")
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _CHILD,
            root,
            committer.job_id,
            json.dumps([str(a) for a in accepted]),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while len(table.data_files()) < 40 and child.poll() is None:
            assert time.monotonic() < deadline, "the child never started renaming"
            time.sleep(0.01)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        _, stderr = child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL, stderr.decode()
    placed = len(table.data_files())
    assert 40 <= placed < 400, placed  # really killed in the middle
    result = table.committer(committer.job_id).commit_job(accepted)
    assert table.data_files() == expected(files)
    assert result.resumed and result.already_done >= placed
    assert result.placed + result.already_done == 400
    assert [k for k in table.all_keys() if k.startswith("_temporary/")] == []
