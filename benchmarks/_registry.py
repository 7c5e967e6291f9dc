"""The benchmark registry, the results it collects and the context benchmarks share.

A benchmark is a function ``(ctx: BenchContext) -> Iterable[Result]`` decorated with
``@benchmark(name, description)`` in a module ``benchmarks/bench_<topic>.py``; ``discover()``
imports every such module, so adding a file is all it takes. Each ``Result`` carries the
measured value *and its baseline measured in the same run* (on the same machine, interleaved
where possible), so the ratio means something even on a busy 2-core box.
"""

from __future__ import annotations

import importlib
import pkgutil
import shutil
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lakewarden.settings import KafkaSettings, Settings

BenchFunc = Callable[["BenchContext"], Iterable["Result"]]


@dataclass(frozen=True, slots=True)
class Result:
    """One measured value against its same-run baseline.

    ``goal`` bounds the ratio value/baseline: at most ``goal`` when lower is better (times),
    at least ``goal`` when higher is better (throughputs); ``None`` means report only.
    ``budget`` bounds the value itself, for an absolute goal ("under 1 s"): it is
    checked beside the ratio, never used as the baseline (a hard-coded number measured in no
    run would make the ratio meaningless on a slower or faster machine).
    """

    benchmark: str
    metric: str
    unit: str
    value: float
    baseline: float
    baseline_label: str
    lower_is_better: bool = True
    goal: float | None = None
    details: dict[str, Any] = field(default_factory=dict)
    budget: float | None = None

    @property
    def ratio(self) -> float:
        return self.value / self.baseline if self.baseline else float("inf")

    @property
    def passed(self) -> bool | None:
        checks = [
            self._within(measured, bound)
            for measured, bound in ((self.ratio, self.goal), (self.value, self.budget))
            if bound is not None
        ]
        return all(checks) if checks else None

    def _within(self, measured: float, bound: float) -> bool:
        return measured <= bound if self.lower_is_better else measured >= bound

    def as_json(self) -> dict[str, Any]:
        return {
            "benchmark": self.benchmark,
            "metric": self.metric,
            "unit": self.unit,
            "value": self.value,
            "baseline": self.baseline,
            "baseline_label": self.baseline_label,
            "ratio": self.ratio,
            "lower_is_better": self.lower_is_better,
            "goal": self.goal,
            "budget": self.budget,
            "passed": self.passed,
            "details": self.details,
        }


@dataclass(frozen=True, slots=True)
class Benchmark:
    name: str
    description: str
    func: BenchFunc


_REGISTRY: dict[str, Benchmark] = {}


def benchmark(name: str, description: str) -> Callable[[BenchFunc], BenchFunc]:
    """Register the decorated function as benchmark ``name``.

    Raises:
        ValueError: ``name`` is already registered.
    """

    def register(func: BenchFunc) -> BenchFunc:
        if name in _REGISTRY:
            raise ValueError(f"benchmark {name!r} is registered twice")
        _REGISTRY[name] = Benchmark(name, description, func)
        return func

    return register


def discover() -> dict[str, Benchmark]:
    """Import every ``benchmarks/bench_*.py`` module and return the registry by name."""
    package = Path(__file__).parent
    for module in pkgutil.iter_modules([str(package)]):
        if module.name.startswith("bench_"):
            importlib.import_module(f"{__package__}.{module.name}")
    return dict(sorted(_REGISTRY.items()))


class BenchContext:
    """What benchmarks share within one run: the scale, and a Kafka broker started on demand.

    The broker is ``LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS`` when set; otherwise the first
    benchmark that asks starts one from ``lakewarden.devstack`` on free 127.0.0.1 ports and
    ``close()`` stops it by pid.
    """

    def __init__(
        self, *, quick: bool = False, events: int | None = None, tables: int | None = None
    ) -> None:
        self.quick = quick
        self.events = events  # ``--events``: how many events a benchmark that takes a count reads
        self.tables = tables  # ``--tables``: how many tables a benchmark over a lake registers
        self.environment: dict[str, Any] = {}
        self._settings: Settings | None = None
        self._cleanups: list[Callable[[], None]] = []

    def scale(self, full: int, quick: int) -> int:
        """``quick`` in a quick (smoke) run, else ``full``."""
        return quick if self.quick else full

    def kafka_settings(self) -> Settings:
        """Settings pointing at a running broker (started on first use).

        Raises:
            DevStackError: the local broker could not be started.
        """
        if self._settings is not None:
            return self._settings
        settings = Settings()
        if settings.kafka.bootstrap_servers is None:
            settings = Settings(kafka=KafkaSettings(bootstrap_servers=self._start_broker()))
            self.environment["kafka"] = "lakewarden.devstack broker started for this run"
        else:
            self.environment["kafka"] = f"external broker {settings.kafka.bootstrap_servers}"
        self._settings = settings
        return settings

    def _start_broker(self) -> str:
        from lakewarden.devstack import KafkaBroker
        from lakewarden.devstack.processes import free_port

        home = Path(tempfile.mkdtemp(prefix="lakewarden-bench-kafka-"))
        broker = KafkaBroker(home=home, port=free_port(), controller_port=free_port())
        self._cleanups.append(lambda: shutil.rmtree(home, ignore_errors=True))
        broker.start()
        self._cleanups.append(broker.stop)
        return broker.bootstrap

    def close(self) -> None:
        """Stop whatever this context started (in reverse order)."""
        while self._cleanups:
            self._cleanups.pop()()
