"""A table's history from its events: why an instant is in its state, and replay.

Public surface::

    build_history, HistoryBuilder     the pure fold: decoded events -> TableHistory
    TableHistory, InstantStory, ...   the story records (frozen dataclasses)
    explain                           sentences answering "why is this instant in this state"
    telling_instant                   the instant most worth explaining (the demo's last step)
    story_lines, table_lines          the history as text
    diff_timelines, ReplayReport      the timeline rebuilt from the topic vs storage's
    TopicReplay                       the rebuild, folded while the topic is read
    FoldSummary                       TopicReplay.summary(): instants by state, rejections
    replay_timeline                   the timeline topic read into a TopicReplay, batch by batch
    read_table_events                 the bounded Kafka read of one table's events
    explain_window, terminal_time_ms  the stretch of the topics explain reads for an instant
    batch_mode                        the cyclic GC paused while a command reads and folds

Everything but ``read_table_events``, ``replay_timeline`` (and ``read_storage_entries``) is
pure: no Kafka, no storage, so it is tested with hand-built event sequences.
"""

from lakewarden.history._batch import batch_mode
from lakewarden.history._lean_fold import FoldSummary
from lakewarden.history._replay_read import replay_timeline
from lakewarden.history.explain import explain, fmt_ms, telling_instant
from lakewarden.history.fold import HistoryBuilder, build_history
from lakewarden.history.model import (
    CancelStep,
    Expiry,
    HeartbeatTrail,
    InstantStory,
    JobRequest,
    JobResult,
    LockGrant,
    Recorded,
    RetentionGap,
    Step,
    TableHistory,
    TaskAttempt,
    Unreadable,
)
from lakewarden.history.reader import ReadTimeoutError, read_table_events
from lakewarden.history.render import history_json, story_lines, table_lines
from lakewarden.history.replay import (
    Difference,
    ReplayReport,
    TopicReplay,
    diff_timelines,
    entries_from_topic,
    read_storage_entries,
)
from lakewarden.history.window import (
    EXPLAIN_LEAD_MS,
    EXPLAIN_TRAIL_MS,
    ReadWindow,
    explain_since_ms,
    explain_window,
    terminal_time_ms,
)

__all__ = [
    "EXPLAIN_LEAD_MS",
    "EXPLAIN_TRAIL_MS",
    "ReadWindow",
    "batch_mode",
    "CancelStep",
    "Difference",
    "Expiry",
    "FoldSummary",
    "HeartbeatTrail",
    "HistoryBuilder",
    "InstantStory",
    "JobRequest",
    "JobResult",
    "LockGrant",
    "ReadTimeoutError",
    "Recorded",
    "ReplayReport",
    "RetentionGap",
    "Step",
    "TableHistory",
    "TaskAttempt",
    "TopicReplay",
    "Unreadable",
    "build_history",
    "diff_timelines",
    "entries_from_topic",
    "explain",
    "explain_since_ms",
    "explain_window",
    "fmt_ms",
    "history_json",
    "read_storage_entries",
    "read_table_events",
    "replay_timeline",
    "story_lines",
    "table_lines",
    "telling_instant",
    "terminal_time_ms",
]
