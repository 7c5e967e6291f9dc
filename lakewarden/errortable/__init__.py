"""The error table (Hudi RFC-20): rows a write could not take, with their context, as a table.

Flow::

    Spark task (error_table.enabled)  --ErrorRecord-->  lakewarden.errors  -->  error-table sink
      bad row left out of the write,                                        buffers per (table,
      counted in failed_records                                             instant), commits
                                                                            the accepted ones

- ``location``: where a table's errors go (``<table root><suffix>`` or the global table);
- ``records``: the ``ErrorRecord`` event (RFC-20's fields, context keys) and its publisher;
- ``acceptance``: the sink's pure logic: buffers, what the main instant accepted, offsets;
- ``table``: the error table itself: schema, create on first use;
- ``commit``: the idempotent commit, through the manifest committer.

Only records of task attempts that the completed main instant accepted (its job's
``_SUCCESS`` summary names them) are committed, each main instant's errors exactly once: the
error table's ``completed`` payload names the (table id, instant) pairs it holds
(``CommitStats.error_sources``), checked under the lock at completion.
"""

from lakewarden.errortable.acceptance import (
    Accepted,
    Discarded,
    ErrorBuffer,
    Outcome,
    Pending,
    SourceKey,
    outcome_of,
)
from lakewarden.errortable.commit import commit_errors
from lakewarden.errortable.location import ErrorTableLocation, error_table_location
from lakewarden.errortable.records import (
    ErrorPublisher,
    ErrorRow,
    error_record,
    parse_error_record,
)
from lakewarden.errortable.table import (
    ERROR_TABLE_SCHEMA,
    SOURCES_KEY,
    SourceErrors,
    committed_sources,
    open_error_table,
)

__all__ = [
    "ERROR_TABLE_SCHEMA",
    "SOURCES_KEY",
    "Accepted",
    "Discarded",
    "ErrorBuffer",
    "ErrorPublisher",
    "ErrorRow",
    "ErrorTableLocation",
    "Outcome",
    "Pending",
    "SourceErrors",
    "SourceKey",
    "commit_errors",
    "committed_sources",
    "error_record",
    "error_table_location",
    "open_error_table",
    "outcome_of",
    "parse_error_record",
]
