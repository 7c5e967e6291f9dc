"""Optional dependencies: which extra installs which import, and the one error naming it.

``pip install lakewarden`` installs what local tables need (pyarrow, pydantic, fastavro, the
CLI). Everything else comes with an extra, and using it without the extra raises
``MissingExtraError`` ("... Help: pip install 'lakewarden[s3]'"), never a bare
``ModuleNotFoundError`` from deep inside an import chain. Two ways in, one error:

- a module of a core package (``events``, ``storage``, ``history``, ``clients``) that imports
  an optional package at its top wraps that import::

      try:
          from confluent_kafka import Producer
      except ImportError as err:
          raise missing_extra("kafka", "Kafka support", err) from err

- a package that is an extra as a whole (``lakewarden.spark``, ``lakewarden_services``)
  checks once, in its ``__init__``, before any of its modules imports the dependency::

      require_extra("spark", "The Spark data source")

``tests/unit/test_extras.py`` imports every module with the optional packages hidden and
requires each to import or fail with ``MissingExtraError``.
"""

from __future__ import annotations

import importlib.util
from typing import Final

from lakewarden.errors import MissingExtraError

# extra -> the top-level imports it provides (pyproject.toml's [project.optional-dependencies]
# lists the distributions, with their pins).
EXTRA_MODULES: Final[dict[str, tuple[str, ...]]] = {
    "kafka": ("confluent_kafka",),
    "s3": ("boto3",),
    "spark": ("pyspark", "pandas", "confluent_kafka"),
    "services": ("confluent_kafka", "prometheus_client"),
    "chart": ("plotly", "matplotlib"),
    "dev": ("confluent_kafka", "boto3", "hypothesis"),
}


def missing_extra(extra: str, feature: str, err: ImportError) -> MissingExtraError:
    """The error for ``err``, an import of ``extra``'s packages that failed."""
    module = err.name or EXTRA_MODULES[extra][0]
    return MissingExtraError(extra, feature=feature, module=module.split(".")[0])


def require_extra(extra: str, feature: str) -> None:
    """Check that every package ``extra`` installs can be imported, without importing it.

    Raises: MissingExtraError naming the first one missing."""
    for module in EXTRA_MODULES[extra]:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a finder refused it, or a broken sys.modules entry
            found = False
        if not found:
            raise MissingExtraError(extra, feature=feature, module=module)


__all__ = ["EXTRA_MODULES", "MissingExtraError", "missing_extra", "require_extra"]
