"""Rounds of side-by-side runs with the order rotated, so no variant always goes first.

Whoever runs first in a round meets the machine in another state than whoever follows: caches
warmed or evicted by the other, the disk still writing back the other's files, the collector
owing for the other's garbage, the CPU clock ramping. A fixed order turns that into a bias of
the ratio; rotating the order spreads it over every variant alike. Every benchmark that
compares variants over rounds orders them with ``rotation`` (``rotated_rounds`` and
``timed_rounds`` do it for the common shapes).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

T = TypeVar("T")
N = TypeVar("N")


def rotation(round_: int, variants: Sequence[N]) -> list[N]:
    """The order of ``variants`` in round ``round_``: rotated by one each round (with two
    variants the order alternates: A B, B A, ...; with n, each goes first every n-th round)."""
    if not variants:
        return []
    shift = round_ % len(variants)
    return [*variants[shift:], *variants[:shift]]


def rotated_rounds(rounds: int, runs: Mapping[str, Callable[[int], T]]) -> dict[str, list[T]]:
    """Call every ``runs[name](round)`` once per round, in the order ``rotation`` gives that
    round; return the results by name, in round order."""
    results: dict[str, list[T]] = {name: [] for name in runs}
    for round_ in range(rounds):
        for name in rotation(round_, list(runs)):
            results[name].append(runs[name](round_))
    return results


def timed_rounds(
    rounds: int, runs: Mapping[str, Callable[[int], object]], *, collect: bool = False
) -> dict[str, list[float]]:
    """``rotated_rounds`` with every call timed: seconds per call by name, in round order.

    ``collect`` runs the garbage collector before every timed call, so one variant does not
    pay for the garbage of the one before it (the collector stays on while timing)."""

    def timing(run: Callable[[int], object]) -> Callable[[int], float]:
        def timed(round_: int) -> float:
            if collect:
                gc.collect()
            start = time.perf_counter()
            run(round_)
            return time.perf_counter() - start

        return timed

    return rotated_rounds(rounds, {name: timing(run) for name, run in runs.items()})
