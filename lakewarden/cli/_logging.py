"""Structured logging for the command line: one logfmt line per record on stderr
(``lakewarden.logfmt``, the format the services log in too)."""

from __future__ import annotations

import logging
import sys
from typing import TextIO

from lakewarden.logfmt import LogfmtFormatter


class _StderrHandler(logging.StreamHandler[TextIO]):
    """Writes to whatever ``sys.stderr`` is at emit time (as logging's last-resort handler
    does), so a handler installed under click's test runner does not outlive its stream."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        """Ignored: the stream is always the current ``sys.stderr``."""


def configure_logging(level: str = "INFO") -> None:
    """Send lakewarden's logs to stderr as logfmt at ``level`` (idempotent)."""
    root = logging.getLogger("lakewarden")
    root.setLevel(level)
    if not any(isinstance(handler, _StderrHandler) for handler in root.handlers):
        handler = _StderrHandler()
        handler.setFormatter(LogfmtFormatter())
        root.addHandler(handler)
    # librdkafka's own log lines (connection refused while a broker starts) are debug noise.
    logging.getLogger("lakewarden.devstack.kafka.client").setLevel(logging.CRITICAL)
