"""What the peers benchmark needs besides the project's virtualenv, fetched on first use.

    python -m benchmarks._peers_setup        # everything (``make peers-deps`` runs this)

- ``infra/peers/delta/jars``: Delta Lake for the project's Spark 4.0 (``delta/pom.xml``);
- ``infra/peers/hudi/jars``: Apache Hudi's Spark 3.5 bundle (``hudi/pom.xml``);
- ``infra/peers/hudi/venv``: a virtualenv with the pyspark of ``hudi/requirements.txt`` that
  the Hudi side runs in (Maven Central has no Hudi bundle for Spark 4.0).

Jars come from Maven Central through ``mvn dependency:copy-dependencies``, as
``make kafka-jars`` does; pyspark from PyPI through pip. Each folder carries a stamp that is
newer than the file it was made from, so a changed pom or pin refetches from an empty folder
and an unchanged one costs nothing. Nothing here runs in ``make test``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PEERS = ROOT / "infra" / "peers"
STAMP = ".fetched"


class PeerSetupError(RuntimeError):
    """A peer's jars or virtualenv could not be made (Maven, pip or the network failed)."""


def _fresh(folder: Path, source: Path) -> bool:
    stamp = folder / STAMP
    return stamp.exists() and stamp.stat().st_mtime >= source.stat().st_mtime


def _run(command: list[str], what: str) -> None:
    try:
        subprocess.run(command, check=True, capture_output=True, text=True, timeout=1800)
    except FileNotFoundError as err:
        raise PeerSetupError(f"{what}: {command[0]} is not installed. Help: install it.") from err
    except subprocess.CalledProcessError as err:
        tail = (err.stdout + err.stderr)[-2000:]
        raise PeerSetupError(f"{what} failed ({' '.join(command)}):\n{tail}") from err


def _maven_jars(name: str) -> list[Path]:
    """The jars of ``infra/peers/<name>/pom.xml``, fetched when missing or older than the pom.

    Raises: PeerSetupError."""
    pom = PEERS / name / "pom.xml"
    folder = pom.parent / "jars"
    if not _fresh(folder, pom):
        shutil.rmtree(folder, ignore_errors=True)  # no jar of an older version stays
        command = ["mvn", "-B", "-q", "-Dstyle.color=never", "-f", str(pom)]
        command += ["dependency:copy-dependencies", f"-DoutputDirectory={folder}"]
        _run(command, f"fetching the {name} jars")
        (folder / STAMP).touch()
    return sorted(folder.glob("*.jar"))


def delta_jars() -> list[Path]:
    """Delta Lake's jars for pyspark 4.0 (local files for ``spark.jars``). Raises:
    PeerSetupError."""
    return _maven_jars("delta")


def hudi_jars() -> list[Path]:
    """Hudi's Spark 3.5 bundle. Raises: PeerSetupError."""
    return _maven_jars("hudi")


def hudi_python() -> Path:
    """The interpreter of the Hudi side's virtualenv (pyspark 3.5), created when missing or
    older than ``hudi/requirements.txt``. Raises: PeerSetupError."""
    requirements = PEERS / "hudi" / "requirements.txt"
    venv = requirements.parent / "venv"
    python = venv / "bin" / "python"
    if not _fresh(venv, requirements):
        shutil.rmtree(venv, ignore_errors=True)
        _run([sys.executable, "-m", "venv", str(venv)], "creating the Hudi virtualenv")
        pip = [str(python), "-m", "pip", "install", "--quiet", "-r", str(requirements)]
        _run(pip, "installing pyspark into the Hudi virtualenv")
        (venv / STAMP).touch()
    return python


def main() -> None:
    for name, jars in (("delta", delta_jars()), ("hudi", hudi_jars())):
        print(f"{name}: {', '.join(jar.name for jar in jars)}")
    print(f"hudi python: {hudi_python()}")


if __name__ == "__main__":
    main()
