"""A Spark standalone cluster on loopback for the cluster tests: one master, two workers.

Started from the pyspark distribution (``SPARK_HOME`` = the pyspark package, which ships
``bin/`` and ``jars/``) with ``bin/spark-class``. The workers bind different loopback addresses
(127.0.0.1 and 127.0.0.2) because Spark never runs a task's speculative copy on a host already
running it: two hosts are what let speculation really launch a second attempt.

The workers start with an environment stripped of Python and lakewarden settings, so their
executors get them only from what the driver configures (``spark.pyspark.python``,
``spark.executorEnv.*``), as on a real cluster.
"""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from lakewarden.devstack.processes import free_port
from lakewarden.testing import wait_until

WORKER_HOSTS = ("127.0.0.1", "127.0.0.2")
_START_TIMEOUT_S = 120
# What a worker (and so its executors) must not inherit from the test process.
_STRIPPED_ENV = ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV")


def spark_home() -> str:
    import pyspark

    return os.path.dirname(pyspark.__file__)


def worker_env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in _STRIPPED_ENV and not k.startswith("LAKEWARDEN_")
    }
    env["SPARK_HOME"] = spark_home()
    return env


@dataclass
class StandaloneCluster:
    work: Path
    master_url: str = ""
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def _spawn(self, name: str, args: list[str]) -> Path:
        log = self.work / f"{name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [os.path.join(spark_home(), "bin", "spark-class"), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=worker_env(),
                cwd=self.work,
                start_new_session=True,  # its own process group: stopped as one, by pid
            )
        self.processes.append(proc)
        return log

    def start(self) -> None:
        """Master and two workers; returns once the master leads. Raises: AssertionError."""
        port = free_port()
        self.master_url = f"spark://127.0.0.1:{port}"
        master_log = self._spawn(
            "master",
            ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
             "--port", str(port), "--webui-port", str(free_port())],
        )  # fmt: skip
        for i, host in enumerate(WORKER_HOSTS):
            work_dir = self.work / f"worker-{i}"
            work_dir.mkdir()
            self._spawn(
                f"worker-{i}",
                ["org.apache.spark.deploy.worker.Worker", "--host", host,
                 "--cores", "1", "--memory", "1g", "--work-dir", str(work_dir),
                 "--webui-port", str(free_port()), self.master_url],
            )  # fmt: skip

        def leading() -> bool:
            self._check_alive()
            return "I have been elected leader" in master_log.read_text(errors="replace")

        # Only the master: a driver registers with it at once (and retries only every 20 s),
        # while the workers, starting meanwhile, register as the driver's JVM starts; the
        # driver waits for both executors (spark.scheduler.minRegisteredResourcesRatio=1).
        wait_until(leading, timeout_s=_START_TIMEOUT_S, what="the Spark master up")

    def _check_alive(self) -> None:
        for proc in self.processes:
            if proc.poll() is not None:
                logs = {
                    p.name: p.read_text(errors="replace")[-2000:] for p in self.work.glob("*.log")
                }
                raise AssertionError(f"a cluster process exited ({proc.args}): {logs}")

    def submit(
        self, script: str, args: list[str], python: str, pythonpath: str, timeout_s: float
    ) -> subprocess.CompletedProcess[bytes]:
        """``spark-submit`` a Python driver to this cluster (client mode), as a user would."""
        return subprocess.run(
            [os.path.join(spark_home(), "bin", "spark-submit"), "--master", self.master_url,
             "--conf", f"spark.pyspark.python={python}",
             "--conf", f"spark.executorEnv.PYTHONPATH={pythonpath}",
             script, *args],
            env=worker_env(), cwd=self.work, capture_output=True, timeout=timeout_s, check=False,
        )  # fmt: skip

    def stop(self) -> None:
        """Kill every process this cluster started (their process groups, by pid)."""
        for proc in self.processes:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for proc in self.processes:
            proc.wait(timeout=30)
