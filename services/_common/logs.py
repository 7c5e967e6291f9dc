"""Structured logging for a service process: logfmt lines on stderr, librdkafka's included.

The dev stack appends a service's stderr to ``<state>/services/<name>.log``; one logfmt line
per record (the CLI's format) keeps the stack's and the services' logs greppable alike.
Every line carries ``service=<name>``.
"""

from __future__ import annotations

import logging
import sys

from lakewarden.logfmt import LogfmtFormatter


class _ServiceFilter(logging.Filter):
    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def filter(self, record: logging.LogRecord) -> bool:
        record.service = self.service
        return True


def setup_logging(service: str, level: str = "INFO") -> None:
    """Route every logger (lakewarden, the Kafka clients') to stderr as logfmt at ``level``.

    Replaces the root logger's handlers, so call it once, at process start.
    """
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(LogfmtFormatter())
    handler.addFilter(_ServiceFilter(service))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
