"""Publishing a lakewarden table as a Delta Lake table: one ``_delta_log/`` version per
completed instant, so engines that read Delta (delta-rs, Polars, DuckDB, Spark, Trino) read it.

- ``versions``: the deterministic content of each version (the instant mapping, add/remove);
- ``schema``: the Arrow schema as Delta's JSON schema, and the protocol it needs;
- ``stats``: per-file stats from Parquet footers, partition values;
- ``log``: reading the ``_delta_log/`` directory;
- ``publisher``: ``DeltaPublisher.sync``, exactly once and in order;
- ``enable``: turning publishing on for an existing table, and publishing on commit;
- ``gate``: what a clean may delete (only files whose ``remove`` is published);
- ``retention``: the log trimmed after a clean, as far as lakewarden's retention went.
"""

from __future__ import annotations

from .enable import attach, enable, publisher_on_commit
from .log import DeltaLogCorruptError, last_version, version_key
from .publisher import DeltaPublisher, PublishResult, PublishStatus
from .schema import UnpublishableSchemaError, schema_string
from .versions import APP_ID, VersionPlan, plan_versions, published_instants

__all__ = [
    "APP_ID",
    "DeltaLogCorruptError",
    "DeltaPublisher",
    "PublishResult",
    "PublishStatus",
    "UnpublishableSchemaError",
    "VersionPlan",
    "attach",
    "enable",
    "last_version",
    "plan_versions",
    "published_instants",
    "publisher_on_commit",
    "schema_string",
    "version_key",
]
