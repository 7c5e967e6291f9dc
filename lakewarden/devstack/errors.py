"""Errors of the local stack (broker, S3 endpoint, services run on this machine)."""

from __future__ import annotations

from lakewarden.errors import NonRetryableError


class DevStackError(NonRetryableError):
    """A part of the local stack could not be started, checked or stopped.

    The message names the part, what went wrong and, where there is one, the tail of its log
    and what to do next ("Help: ...").
    """
