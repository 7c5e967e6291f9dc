"""The built wheel and fresh virtualenvs with it installed, as a user installs lakewarden.

``wheel`` builds once per session, from a copy of the sources the wheel is made of (so the
checkout gets no ``build/`` directory and concurrent sessions do not share one).
``install(extras)`` makes a new virtualenv (no pip inside: this environment's pip installs into
it with ``--python``) and installs the wheel with ``extras``; its dependencies come from the
package index, as for a user (pip's cache makes repeated runs fast).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from _venvs import Venv

ROOT = Path(__file__).resolve().parents[2]
# What the wheel is built from (pyproject.toml's packages, py-modules and package data).
SOURCES = (
    "pyproject.toml",
    "README.md",
    "pyspark_lakewarden.py",
    "lakewarden",
    "services",
    "lakewarden_services",
    "schemas",
)


def run(command: list[str], *, cwd: Path, timeout: float = 600) -> str:
    """Run ``command`` (without this session's ``PYTHONPATH``: pip must not see the checkout
    as an installed lakewarden); its stdout. Fails the test with its output when it fails."""
    done = subprocess.run(
        command,
        cwd=cwd,
        env=Venv.clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"{command} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done.stdout


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("source")
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir() and not path.is_symlink():
            ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
            shutil.copytree(path, source / name, symlinks=True, ignore=ignore)
        else:
            shutil.copy(path, source / name, follow_symlinks=False)
    dist = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), "."], cwd=source)
    (built,) = dist.glob("lakewarden-*.whl")
    return built


@pytest.fixture(scope="session")
def install(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Venv]:
    def make(extras: str) -> Venv:
        root = tmp_path_factory.mktemp(f"venv-{extras or 'core'}")
        run([sys.executable, "-m", "venv", "--without-pip", str(root)], cwd=root)
        venv = Venv(root)
        target = f"{wheel}[{extras}]" if extras else str(wheel)
        run(
            [sys.executable, "-m", "pip", "--python", str(venv.python), "install", "-q", target],
            cwd=root,
            timeout=900,
        )
        return venv

    return make
