"""Names that become paths: checked once, at the boundary, so none escapes its folder.

A table's name becomes a folder (the default ingest checkpoint
``<state dir>/ingest/<name>-<id>/<topic>``, the error table ``<root>_errors``), and a Kafka
topic becomes a folder and a subscription. A name with ``..``, a path separator, NUL or
hundreds of characters would escape the state folder or fail much later with a raw OS error
(a NUL in a table name was accepted at create; a topic ``../../../x`` made the checkpoint land
outside the state folder, and Spark's Kafka source waited forever for the illegal topic).

- A table name: 1-200 characters (room for ``-<table id>`` in a 255-byte file name), no
  control characters (NUL included), no ``/`` or ``\\``, not ``.`` or ``..``.
- A topic: Kafka's own rule, 1-249 characters of ``[A-Za-z0-9._-]``, not ``.`` or ``..``.
"""

from __future__ import annotations

import re
from pathlib import Path

from lakewarden.errors import NonRetryableError

MAX_TABLE_NAME = 200
MAX_TOPIC_NAME = 249  # Kafka's limit
_TOPIC = re.compile(r"^[A-Za-z0-9._-]+$")


class InvalidNameError(NonRetryableError):
    """A table name or topic that cannot safely become a path or a Kafka topic."""

    def __init__(self, what: str, name: str, why: str) -> None:
        shown = name if len(name) <= 60 else name[:60] + "..."
        super().__init__(f"invalid {what} {shown!r}: {why}. Help: {_HELP[what]}")
        self.what = what
        self.name = name


_HELP = {
    "table name": "a name without path separators or control characters, at most 200 characters.",
    "topic": "Kafka topics use letters, digits, '.', '_' and '-' (at most 249 characters).",
    "folder": "pass a folder inside the state folder, or the option that sets it explicitly.",
}


def check_table_name(name: str) -> str:
    """``name`` unchanged if it may name a table.

    Raises: InvalidNameError."""
    if not name or len(name) > MAX_TABLE_NAME:
        raise InvalidNameError("table name", name, f"it has {len(name)} characters")
    if name in (".", ".."):
        raise InvalidNameError("table name", name, "it is a relative folder name")
    if "/" in name or "\\" in name:
        raise InvalidNameError("table name", name, "it contains a path separator")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        raise InvalidNameError("table name", name, "it contains a control character (or NUL)")
    return name


def check_topic_name(topic: str) -> str:
    """``topic`` unchanged if Kafka accepts it as a topic name.

    Raises: InvalidNameError."""
    if not topic or len(topic) > MAX_TOPIC_NAME:
        raise InvalidNameError("topic", topic, f"it has {len(topic)} characters")
    if topic in (".", ".."):
        raise InvalidNameError("topic", topic, "it is a relative folder name")
    if not _TOPIC.match(topic):
        raise InvalidNameError("topic", topic, "it has characters Kafka does not allow")
    return topic


def child_folder(parent: Path, *names: str) -> Path:
    """``parent / names...`` resolved, proven to be inside ``parent`` (symlinks included).

    Raises: InvalidNameError (the result would be outside ``parent``)."""
    base = parent.resolve()
    path = base.joinpath(*names).resolve()
    if not path.is_relative_to(base):
        raise InvalidNameError("folder", "/".join(names), f"it resolves outside {base}")
    return path


__all__ = [
    "MAX_TABLE_NAME",
    "MAX_TOPIC_NAME",
    "InvalidNameError",
    "check_table_name",
    "check_topic_name",
    "child_folder",
]
