r"""logfmt: one ``key=value`` line per log record, for the CLI, the dev stack and the services.

``log.info("kafka ready", extra={"pid": 42, "bootstrap": "127.0.0.1:9092"})`` becomes::

    ts=2025-01-01T12:00:00.123Z level=info logger=lakewarden.devstack.kafka \\
        msg="kafka ready" pid=42 bootstrap=127.0.0.1:9092

Key-value pairs (not prose) so that logs of the stack and the services can be grepped and
parsed alike. Fields come from ``extra``; everything a plain ``LogRecord`` carries is left out.
"""

from __future__ import annotations

import logging
import time
from typing import Any

_STANDARD_ATTRS = frozenset(
    logging.LogRecord("", 0, "", 0, "", None, None).__dict__.keys() | {"message", "asctime"}
)


def _quote(value: Any) -> str:
    text = str(value)
    if text and not any(ch in text for ch in ' "=\n\t'):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


class LogfmtFormatter(logging.Formatter):
    """Formats a record as ``ts=... level=... logger=... msg=... key=value ...``."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        pairs = [
            ("ts", f"{stamp}.{int(record.msecs):03d}Z"),
            ("level", record.levelname.lower()),
            ("logger", record.name),
            ("msg", record.getMessage()),
        ]
        pairs += [(k, v) for k, v in record.__dict__.items() if k not in _STANDARD_ATTRS]
        line = " ".join(f"{key}={_quote(value)}" for key, value in pairs)
        if record.exc_info:
            line += " exc=" + _quote(self.formatException(record.exc_info))
        return line
