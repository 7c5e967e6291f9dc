"""Printing results as a rich table and writing them as JSON."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks._registry import Result

RESULTS_DIR = Path(__file__).parent / "results"


def environment() -> dict[str, Any]:
    """What the numbers depend on: machine, interpreter, library versions, commit."""
    import confluent_kafka

    versions = {
        package: metadata.version(package)
        for package in ("fastavro", "confluent-kafka", "faust-streaming")
    }
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        # How busy the machine was (1-minute load average as the run ended): ratios are
        # same-run, but a loaded machine still widens them.
        "load_1m": round(os.getloadavg()[0], 1),
        "librdkafka": confluent_kafka.libversion()[0],
        "commit": _git_commit(),
        **versions,
    }


def print_table(console: Console, results: list[Result], errors: dict[str, str]) -> None:
    baselines = {f"{r.benchmark}: {r.baseline_label}" for r in results}
    table = Table(
        title="lakewarden benchmarks",
        title_justify="left",
        caption="baseline, measured in the same run -- " + "; ".join(sorted(baselines)),
        caption_justify="left",
    )
    for column in ("benchmark", "metric", "value", "baseline", "ratio", "goal"):
        table.add_column(column, justify="left" if column in ("benchmark", "metric") else "right")
    for result in results:
        sign = "≤" if result.lower_is_better else "≥"
        bounds = [f"{sign}{result.goal:g}x"] if result.goal is not None else []
        if result.budget is not None:
            bounds.append(f"{sign}{result.budget:g} {result.unit}")
        goal = "; ".join(bounds) or "-"
        status = {None: "", True: " [green]ok[/]", False: " [red]MISSED[/]"}[result.passed]
        table.add_row(
            result.benchmark,
            result.metric,
            f"{result.value:.3f} {result.unit}",
            f"{result.baseline:.3f} {result.unit}",
            f"{result.ratio:.3f}",
            goal + status,
        )
    for name, error in errors.items():
        table.add_row(name, "[red]failed[/]", "", "", "", error)
    console.print(table)


def write_json(
    results: list[Result],
    errors: dict[str, str],
    *,
    started: datetime,
    quick: bool,
    context_environment: dict[str, Any],
    directory: Path = RESULTS_DIR,
) -> Path:
    """Write ``<UTC start time>.json`` and ``latest.json``; return the first."""
    directory.mkdir(parents=True, exist_ok=True)
    document = {
        "started": started.isoformat(),
        "duration_s": round((datetime.now(UTC) - started).total_seconds(), 1),
        "quick": quick,
        "environment": {**environment(), **context_environment},
        "results": [result.as_json() for result in results],
        "errors": errors,
    }
    text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    path = directory / f"{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(text)
    (directory / "latest.json").write_text(text)
    return path


def _git_commit() -> str | None:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).parent,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None
