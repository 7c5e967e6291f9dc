"""A fresh virtualenv, as tests/packaging's fixtures make it."""

from __future__ import annotations

import os
from pathlib import Path


class Venv:
    """A fresh virtualenv: ``python`` and ``bin(name)`` (a console script)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.python = root / "bin" / "python"

    def bin(self, name: str) -> Path:
        return self.root / "bin" / name

    def env(self, **extra: str) -> dict[str, str]:
        """An environment with nothing of the checkout's or the dev venv's in it."""
        return {**self.clean_env(), **extra}

    @staticmethod
    def clean_env() -> dict[str, str]:
        """This process's environment without lakewarden's settings, Spark's Python and
        ``PYTHONPATH`` (the checkout)."""
        dropped = ("LAKEWARDEN_", "PYSPARK_", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
        return {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
