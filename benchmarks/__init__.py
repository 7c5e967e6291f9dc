"""Side-by-side measurements: ``python -m benchmarks [NAME ...]`` (``make bench``).

Every benchmark reports a measured value, its baseline measured in the same run, and the
ratio, printed as a table and written as JSON under ``benchmarks/results/`` (git-ignored).

Adding one: create ``benchmarks/bench_<topic>.py`` with::

    from benchmarks import BenchContext, Result, benchmark

    @benchmark("lock", "lock acquire+release round trip vs the Kafka round-trip floor")
    def lock_round_trip(ctx: BenchContext) -> Iterator[Result]:
        settings = ctx.kafka_settings()        # a broker, started once per run if needed
        ...
        yield Result(benchmark="lock", metric="p50", unit="ms", value=..., baseline=...,
                     baseline_label="raw produce->consume", goal=3.0)

``ctx.scale(full, quick)`` picks iteration counts so ``--quick`` stays a fast smoke run.
"""

from benchmarks._registry import BenchContext, Benchmark, Result, benchmark, discover

__all__ = ["BenchContext", "Benchmark", "Result", "benchmark", "discover"]
