"""``python -m benchmarks [NAME ...]``: run benchmarks, print a table, write JSON.

    python -m benchmarks              every registered benchmark
    python -m benchmarks codec        just one (or several) by name
    python -m benchmarks --list       what is registered
    python -m benchmarks --quick      small iteration counts (a smoke run, numbers are rough)
    python -m benchmarks --check      exit 1 if a result misses its goal
    python -m benchmarks replay --events 1000000   a count for the benchmarks that take one
    python -m benchmarks lake --tables 1000        a lake of that many tables

Exit status 1 when a benchmark fails (or, with --check, misses its goal).
"""

from __future__ import annotations

import logging
import sys
import traceback
from datetime import UTC, datetime
from pathlib import Path

import click
from rich.console import Console

from benchmarks._registry import BenchContext, Result, discover
from benchmarks._report import RESULTS_DIR, print_table, write_json


@click.command()
@click.argument("names", nargs=-1)
@click.option("--list", "list_only", is_flag=True, help="List registered benchmarks.")
@click.option("--quick", is_flag=True, help="Small iteration counts (smoke run).")
@click.option("--check", is_flag=True, help="Exit 1 when a result misses its goal.")
@click.option(
    "--events",
    type=click.IntRange(min=3),
    default=None,
    help="How many events or rows benchmarks that take a count use (replay, python_peers, ingest; "
    "default: theirs).",
)
@click.option(
    "--tables",
    type=click.IntRange(min=30),
    default=None,
    help="How many tables benchmarks over a lake register (lake; default: theirs).",
)
@click.option(
    "--results-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=RESULTS_DIR,
    show_default=True,
    help="Where the JSON goes.",
)
def main(
    names: tuple[str, ...],
    list_only: bool,
    quick: bool,
    check: bool,
    events: int | None,
    tables: int | None,
    results_dir: Path,
) -> None:
    """Run lakewarden's side-by-side benchmarks."""
    logging.basicConfig(level=logging.WARNING)
    console = Console()
    registry = discover()
    if list_only:
        for benchmark in registry.values():
            console.print(f"[bold]{benchmark.name}[/]  {benchmark.description}")
        return
    unknown = sorted(set(names) - set(registry))
    if unknown:
        raise click.UsageError(f"unknown benchmark(s) {unknown}; registered: {sorted(registry)}")
    selected = [registry[name] for name in names] if names else list(registry.values())

    started = datetime.now(UTC)
    context = BenchContext(quick=quick, events=events, tables=tables)
    results: list[Result] = []
    errors: dict[str, str] = {}
    try:
        for benchmark in selected:
            console.print(f"running [bold]{benchmark.name}[/]: {benchmark.description}")
            try:
                results.extend(benchmark.func(context))
            except Exception as err:  # one failing benchmark must not hide the others
                errors[benchmark.name] = f"{type(err).__name__}: {err}"
                console.print(traceback.format_exc(), style="dim", markup=False)
    finally:
        context.close()

    print_table(console, results, errors)
    path = write_json(
        results,
        errors,
        started=started,
        quick=quick,
        context_environment=context.environment,
        directory=results_dir,
    )
    console.print(f"results written to {path}")
    missed = check and any(result.passed is False for result in results)
    sys.exit(1 if errors or missed else 0)


if __name__ == "__main__":
    main()
