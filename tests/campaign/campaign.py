"""The randomized fault campaign: many seeded runs against the real stack.

    python tests/campaign/campaign.py --runs 200 --seed 1 [--duration 20] [--s3 | --no-s3]
    make campaign RUNS=200 SEED=1                # the same
    make campaign RUNS=200 MODE=embedded DURATION=6   # no Kafka: processes and the timeline

``--mode embedded`` (``_embedded``): no Kafka and no services; writers, two executors, two
cleaners, two cancel requesters and a reader in separate processes, each with its own embedded
coordinator, with stalls at their destructive steps.

Run ``i`` plays the plan of seed ``SEED + i`` (``_schedule.make_plan``). Runs share one stack
(Kafka, SeaweedFS with ``--s3``, the services) for ``--runs-per-stack`` runs, then it is torn
down (checking that nothing it started survives) and a fresh one started: a cold start costs
more than a run on this machine. Every run leaves the stack healed and healthy (checked).

Each run prints one line; a failing run prints its violations and the one-line command that
replays its seed. The totals (runs, faults by kind, writes by outcome, violations by name) are
printed at the end and written to ``<out>/summary.json``. Exit status 1 if any run failed.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

from _checkers import KNOWN_ISSUES, Violation
from _embedded import EmbeddedStack, run_embedded
from _runner import RunResult, reproduce_command, run_one
from _schedule import make_embedded_plan, make_plan
from _stack import WORKLOAD_SERVICES, CampaignStack

from lakewarden.devstack import SERVICES, processes


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--duration", type=float, default=20.0, help="workload seconds per run")
    parser.add_argument("--runs-per-stack", type=int, default=10)
    parser.add_argument("--s3", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument(
        "--all-services",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run (and fault) every service, not only those Python writers use",
    )
    parser.add_argument(
        "--table-services",
        type=float,
        default=0.5,
        help="share of runs with two clustering/compaction executors and cancel requests",
    )
    parser.add_argument(
        "--spark",
        type=float,
        default=0.15,
        help="share of runs with a Spark writer (local[1]; heavy on a small machine)",
    )
    parser.add_argument(
        "--mode",
        choices=("kafka", "embedded"),
        default="kafka",
        help="kafka: the real stack; embedded: no Kafka, every actor in its own process",
    )
    parser.add_argument("--out", type=Path, default=None, help="run folders (default: a temp dir)")
    return parser.parse_args(argv)


def _stack_down(stack: CampaignStack) -> list[str]:
    """Stop the stack; name every process of it that survived (a violation)."""
    pids = stack.pids()
    stack.down()
    return [f"process_left_behind: stack pid {pid}" for pid in pids if processes.group_members(pid)]


def _stop_on_sigterm(signum: int, frame: object) -> None:
    """SIGTERM ends the campaign as an exception would: the run stops its writers and the
    stack is torn down (a background job ignores SIGINT)."""
    raise SystemExit(128 + signum)


def main(argv: list[str]) -> int:
    args = _parse(argv)
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    out = args.out or Path(tempfile.mkdtemp(prefix="lakewarden-campaign-"))
    services = tuple(s.name for s in SERVICES) if args.all_services else WORKLOAD_SERVICES
    results: list[RunResult] = []
    stack_problems: list[str] = []
    stack: CampaignStack | None = None
    print(f"campaign: {args.runs} runs from seed {args.seed}, files in {out}", flush=True)
    if args.mode == "embedded":
        return _embedded_campaign(args, out)
    try:
        for index in range(args.runs):
            if stack is None or index % args.runs_per_stack == 0:
                if stack is not None:
                    stack_problems += _stack_down(stack)
                stack = CampaignStack(
                    out / f"stack-{index // args.runs_per_stack}",
                    with_s3=args.s3,
                    services=services,
                )
                stack.up()
            seed = args.seed + index
            plan = make_plan(
                seed,
                duration_s=args.duration,
                services=stack.services,
                s3_available=args.s3,
                table_services_share=args.table_services,
                spark_share=args.spark,
            )
            try:
                result = run_one(stack, plan, out / f"run-{seed}")
            except Exception:  # the harness itself failed: a failed run, and a fresh stack
                traceback.print_exc()
                result = RunResult(seed, plan.on_s3)
                result.violations.append(Violation("run_error", traceback.format_exc(limit=3)))
                stack_problems += _stack_down(stack)
                stack = None
            results.append(result)
            print(result.summary(), flush=True)
            for violation in result.violations:
                print(f"  VIOLATION {violation}", flush=True)
            for violation in result.known:
                print(f"  known issue {violation}", flush=True)
            if result.violations or result.known:
                again = reproduce_command(
                    seed, args.duration, spark=args.spark, table_services=args.table_services
                )
                print(f"  reproduce: {again}", flush=True)
            _summary(results, stack_problems, out)  # kept up to date: a campaign may be cut short
    finally:
        if stack is not None:
            stack_problems += _stack_down(stack)
    return _report(results, stack_problems, out)


def _embedded_campaign(args: argparse.Namespace, out: Path) -> int:
    """The embedded mode: no stack to start, one run after another."""
    stack = EmbeddedStack(out / "state")
    results: list[RunResult] = []
    for index in range(args.runs):
        seed = args.seed + index
        plan = make_embedded_plan(seed, duration_s=args.duration)
        try:
            result = run_embedded(stack, plan, out / f"run-{seed}")
        except Exception:  # the harness itself failed: a failed run
            traceback.print_exc()
            result = RunResult(seed, False)
            result.violations.append(Violation("run_error", traceback.format_exc(limit=3)))
        results.append(result)
        print(result.summary(), flush=True)
        for violation in result.violations:
            print(f"  VIOLATION {violation}", flush=True)
        if result.violations:
            print(f"  reproduce: {reproduce_command(seed, args.duration, mode='embedded')}")
        _summary(results, [], out)
    return _report(results, [], out)


def _report(results: list[RunResult], stack_problems: list[str], out: Path) -> int:
    summary = _summary(results, stack_problems, out)
    print(json.dumps(summary, indent=1))
    return 1 if summary["failed_seeds"] or stack_problems else 0


def _summary(results: list[RunResult], stack_problems: list[str], out: Path) -> dict[str, Any]:
    """The totals so far, also written to ``<out>/summary.json``."""
    faults: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()
    spark: Counter[str] = Counter()
    services: Counter[str] = Counter()
    unannounced = 0
    violations: Counter[str] = Counter()
    known: Counter[str] = Counter()
    for result in results:
        faults.update(result.faults)
        outcomes.update(result.outcomes)
        spark.update(result.spark)
        services.update(result.services)
        unannounced += result.unannounced
        violations.update(v.name for v in result.violations)
        known.update(v.name for v in result.known)
    failed = [r.seed for r in results if r.violations]
    summary: dict[str, Any] = {
        "runs": len(results),
        "failed_seeds": failed,
        "faults": dict(sorted(faults.items())),
        "writes": dict(sorted(outcomes.items())),
        "spark_writes": dict(sorted(spark.items())),
        "runs_with_spark": sum(1 for r in results if r.spark),
        "table_service_steps": dict(sorted(services.items())),
        "timeline_entries_unannounced": unannounced,
        "violations": dict(sorted(violations.items())),
        "known_issues": {name: [n, KNOWN_ISSUES[name]] for name, n in sorted(known.items())},
        "stack_problems": stack_problems,
        "seconds": round(sum(r.seconds for r in results)),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
