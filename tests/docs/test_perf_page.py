"""benchmarks/perf_page.py: the latest figure per (benchmark, metric), across result files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.perf_page import kept_figures, latest_figures, render, save_figures


def _result(benchmark: str, metric: str, value: float, **extra: Any) -> dict[str, Any]:
    result = {
        "benchmark": benchmark,
        "metric": metric,
        "unit": "s",
        "value": value,
        "baseline": 2.0,
        "baseline_label": "pyarrow | alone",
        "ratio": value / 2.0,
        "lower_is_better": True,
        "goal": 1.2,
        "budget": None,
        "passed": value / 2.0 <= 1.2,
        "details": {},
    }
    return {**result, **extra}


def _run(directory: Path, name: str, started: str, commit: str, results: list[Any], **kw: Any):
    document = {
        "started": started,
        "quick": False,
        "environment": {
            "commit": commit,
            "cpus": 2,
            "python": "3.11.7",
            "platform": "Linux",
            "load_1m": 1.5,
        },
        "results": results,
        "errors": {},
        **kw,
    }
    (directory / name).write_text(json.dumps(document))


def test_a_subset_run_updates_only_its_rows(tmp_path: Path) -> None:
    _run(
        tmp_path,
        "20260101T000000Z.json",
        "2026-01-01T00:00:00+00:00",
        "aaa1111",
        [_result("read", "full read", 2.0), _result("read", "cold read", 3.0, goal=None)],
    )
    # A later run of one metric, a later quick run (ignored), and latest.json (a copy; ignored).
    _run(
        tmp_path,
        "20260102T000000Z.json",
        "2026-01-02T00:00:00+00:00",
        "bbb2222",
        [_result("read", "full read", 4.0)],
    )
    _run(
        tmp_path,
        "20260103T000000Z.json",
        "2026-01-03T00:00:00+00:00",
        "ccc3333",
        [_result("read", "full read", 9.0)],
        quick=True,
    )
    _run(
        tmp_path,
        "latest.json",
        "2026-01-04T00:00:00+00:00",
        "ddd4444",
        [_result("read", "cold read", 9.0)],
    )
    (tmp_path / "broken.json").write_text("{not json")

    figures = latest_figures(tmp_path)

    assert {key: figure.environment["commit"] for key, figure in figures.items()} == {
        ("read", "full read"): "bbb2222",
        ("read", "cold read"): "aaa1111",
    }
    assert figures[("read", "full read")].result["value"] == 4.0


def test_the_page_has_a_row_per_goal_and_names_what_has_no_figure(tmp_path: Path) -> None:
    _run(
        tmp_path,
        "20260101T000000Z.json",
        "2026-01-01T00:00:00+00:00",
        "aaa1111",
        [
            _result("read", "full read", 2.0),
            _result("read", "cold read", 3.0, goal=None),
            _result("lock", "p99", 0.5, goal=None, budget=0.05, passed=False),
        ],
    )
    page = render(latest_figures(tmp_path), {"read": "a read", "lock": "a lock", "mor": "m"})

    goals = page.split("## Figures with a goal")[1].split("## Figures reported")[0]
    rows = [line for line in goals.splitlines() if line.startswith("| `")]
    assert len(rows) == 2
    lock = next(row for row in rows if row.startswith("| `lock`"))
    assert "≤ 0.05 s" in lock and "**no**" in lock and "`aaa1111`" in lock
    read = next(row for row in rows if row.startswith("| `read`"))
    assert "pyarrow \\| alone: 2 s" in read and "≤ 1.2x" in read and "2026-01-01" in read
    assert read.endswith("| 2 CPUs, Python 3.11.7 | 1.5 |")
    report_only = page.split("## Figures reported without a goal")[1].split("## Benchmarks")[0]
    assert "cold read" in report_only
    missing = page.split("## Benchmarks with no current figure")[1]
    assert "`mor`: m" in missing and "`read`" not in missing
    for word in ("round", "session", "A/B"):
        assert word not in page


def test_kept_figures_survive_a_clone_and_only_later_runs_replace_them(tmp_path: Path) -> None:
    """``figures.json`` is what a fresh clone regenerates the page from: a run that started
    after a kept figure replaces it, an older run does not, and other kept rows stay."""
    results = tmp_path / "results"
    results.mkdir()
    _run(results, "a.json", "2026-01-02T00:00:00+00:00", "bbb2222", [_result("read", "full", 4.0)])
    _run(results, "b.json", "2025-12-01T00:00:00+00:00", "0000000", [_result("lock", "p50", 9.0)])
    kept_path = tmp_path / "figures.json"
    seed = {
        "figures": [
            {"result": _result(b, m, 1.0), "started": "2026-01-01", "environment": {"commit": "k"}}
            for b, m in (("read", "full"), ("lock", "p50"), ("mor", "read"))
        ]
    }
    kept_path.write_text(json.dumps(seed))
    figures = latest_figures(results, kept_figures(kept_path))
    assert figures[("read", "full")].result["value"] == 4.0  # a later run replaces it
    assert figures[("lock", "p50")].result["value"] == 1.0  # an older run does not
    assert figures[("mor", "read")].environment == {"commit": "k"}  # untouched rows stay
    save_figures(figures, kept_path)
    assert kept_figures(kept_path) == figures
