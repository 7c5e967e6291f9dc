"""The services' console scripts (``lakewarden-timeline-lock``, ...; pyproject.toml
``[project.scripts]``): each runs what ``python -m lakewarden_services.<name>`` runs.

They live in the library, not in ``lakewarden_services``, so that without the ``services``
extra the command fails with one line naming it (``Error: ... Help: pip install
'lakewarden[services]'``, exit 1) instead of a traceback from the package's import.
"""

from __future__ import annotations

import importlib
import sys

from lakewarden.errors import MissingExtraError


def run(service: str) -> None:
    """Run ``lakewarden_services.<service>`` (its ``__main__.main``) in this process."""
    try:
        module = importlib.import_module(f"lakewarden_services.{service}.__main__")
    except MissingExtraError as err:
        print(f"Error: {err}", file=sys.stderr)
        raise SystemExit(1) from None
    module.main()


def timeline_lock() -> None:
    run("timeline_lock")


def heartbeat_monitor() -> None:
    run("heartbeat_monitor")


def job_committer() -> None:
    run("job_committer")


def error_sink() -> None:
    run("error_sink")


def cleaner() -> None:
    run("cleaner")


def cancel_manager() -> None:
    run("cancel_manager")


def publisher() -> None:
    run("publisher")


__all__ = [
    "cancel_manager",
    "cleaner",
    "error_sink",
    "heartbeat_monitor",
    "job_committer",
    "publisher",
    "run",
    "timeline_lock",
]
