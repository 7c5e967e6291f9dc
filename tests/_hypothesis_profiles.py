"""Hypothesis settings profiles: derandomized in CI, random in development and fuzzing.

A CI run must not fail on a lucky draw (one did: a lone surrogate key, now an ``@example`` on
``test_attempt_file_names_round_trip``), and random exploration must still happen somewhere.
So the profile is chosen by the environment (``select_profile``):

- ``ci`` when ``CI=true``: derandomized (the same examples every run), no example database,
  a fixed budget, no deadline or too-slow check (CI machines are shared), failures print a blob to
  reproduce them with ``@reproduce_failure``.
- ``dev`` otherwise: random draws and hypothesis's local example database, the same budget,
  so a run on a laptop explores and replays what it found last time.
- ``fuzz`` with ``HYPOTHESIS_PROFILE=fuzz`` (``make fuzz``): random draws and
  ``FUZZ_FACTOR`` times the budget, outside ``make test``.

``HYPOTHESIS_PROFILE`` names a profile explicitly and wins over ``CI``. Every failure a dev or
fuzz run finds is kept as an ``@example`` on its test, so CI checks it forever after.

Tests that set their own ``max_examples`` (cheaper or costlier than the default) write it as
``max_examples=examples(n)``: ``n`` in ``ci`` and ``dev``, ``FUZZ_FACTOR * n`` in ``fuzz``.
A plain number there would pin the budget in every profile, fuzzing included.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

BASE_EXAMPLES = 100
FUZZ_FACTOR = 20
# Hypothesis's defaults as the parent of every profile: with CI set, hypothesis loads its own
# "ci" profile at import, and a profile registered on top would inherit from that one.
_DEFAULTS = settings.get_profile("default")

settings.register_profile(
    "ci",
    parent=_DEFAULTS,
    derandomize=True,
    database=None,
    max_examples=BASE_EXAMPLES,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],  # timing on a shared machine is luck too
)
settings.register_profile("dev", parent=_DEFAULTS, max_examples=BASE_EXAMPLES, print_blob=True)
settings.register_profile(
    "fuzz",
    parent=_DEFAULTS,
    max_examples=BASE_EXAMPLES * FUZZ_FACTOR,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)


def select_profile() -> str:
    """The profile name for this environment (see the module docstring)."""
    explicit = os.environ.get("HYPOTHESIS_PROFILE", "").strip()
    if explicit:
        return explicit
    return "ci" if os.environ.get("CI", "").strip().lower() in ("true", "1") else "dev"


def load_profile() -> str:
    """Load the profile for this environment and return its name.

    Raises: hypothesis.errors.InvalidArgument (``HYPOTHESIS_PROFILE`` names no profile)."""
    name = select_profile()
    settings.load_profile(name)
    return name


def examples(n: int) -> int:
    """``n`` examples scaled by the selected profile's budget (``n`` in ``ci`` and ``dev``)."""
    budget = settings.get_profile(select_profile()).max_examples
    return max(1, n * budget // BASE_EXAMPLES)
