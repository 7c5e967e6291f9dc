"""One exception root for lakewarden, with branches that tell the caller what to do next.

- ``RetryableError``: the operation may succeed if repeated after re-reading state
  (a lost append race, a transient broker or store fault).
- ``NonRetryableError``: repeating it will fail the same way (bad input, a named conflict,
  an illegal transition, a path outside the table root).
- ``CommitStateUnknownError``: the outcome is unknown (a reply was lost). Never retry blindly:
  reconcile by reading state (the timeline, the job's ``_SUCCESS``) first.

Entity ids (table, instant, attempt) are attributes so that handlers and metrics can use them
without parsing messages. Messages say what was expected, what was found, and what to do.
"""

from __future__ import annotations


class LakewardenError(Exception):
    """Root of every error lakewarden raises on purpose."""

    def __init__(
        self,
        message: str,
        *,
        table: str | None = None,
        instant: str | None = None,
        attempt: str | None = None,
    ) -> None:
        super().__init__(message)
        self.table = table
        self.instant = instant
        self.attempt = attempt


class RetryableError(LakewardenError):
    """Re-read state and try again; the same call may succeed."""


class NonRetryableError(LakewardenError):
    """The same call will fail the same way; fix the input or the situation first."""


class CommitStateUnknownError(LakewardenError):
    """Whether the effect happened is unknown: reconcile by reading state, never blindly retry."""


class ConfigurationError(NonRetryableError):
    """Settings or table configuration are invalid or inconsistent."""


class MissingExtraError(NonRetryableError, ImportError):
    """A feature needs an optional dependency that is not installed (``pip install lakewarden``
    installs the library for local tables; Kafka, S3, Spark, the services and the charts come
    with extras). Also an ``ImportError``, since that is what it replaces.

    ``extra`` names the extra that installs it (``pip install 'lakewarden[<extra>]'``)."""

    def __init__(self, extra: str, *, feature: str, module: str) -> None:
        super().__init__(
            f"{feature} needs the Python package {module!r}, which is not installed. "
            f"Help: pip install 'lakewarden[{extra}]'"
        )
        self.extra = extra
        self.name = module
