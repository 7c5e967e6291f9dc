"""Key and prefix validation shared by every backend, so a key means the same on all of them.

A key is ``/``-separated, relative, with no empty, ``.`` or ``..`` segments, no NUL and no
backslash (which a filesystem could treat as a separator), and encodable as UTF-8: a lone
surrogate (``'\ud800'``, which hypothesis found) has no bytes on disk or in S3, and would fail
later as a raw ``UnicodeEncodeError`` instead of here with the named error. Segments starting with
``TEMP_PREFIX`` are reserved: the local backend names its temporary files that way, and a key
that looked like one would be hidden from listings.
"""

from __future__ import annotations

from lakewarden.storage import InvalidKeyError

TEMP_PREFIX = ".lw-tmp-"
_FORBIDDEN_CHARS = ("\x00", "\\")
# A file or directory name: 255 bytes on ext4, xfs, APFS, NTFS. S3 would take longer segments,
# but a key must mean the same on every backend (a table is copied between them).
MAX_SEGMENT_BYTES = 255


def _check_segments(segments: list[str], *, what: str, original: str) -> None:
    for segment in segments:
        if segment in ("", ".", ".."):
            raise InvalidKeyError(
                f"invalid {what} {original!r}: empty, '.' or '..' segments are not allowed. "
                "Help: use a relative path like 'a/b/c'.",
                key=original,
            )
        if len(segment) * 4 > MAX_SEGMENT_BYTES and len(segment.encode()) > MAX_SEGMENT_BYTES:
            shown = original if len(original) <= 100 else original[:100] + "..."
            raise InvalidKeyError(
                f"invalid {what} {shown!r}: a segment of {len(segment.encode())} bytes; the "
                f"limit is {MAX_SEGMENT_BYTES} (a file or directory name). Help: use "
                "shorter names or values.",
                key=original,
            )
        if segment.startswith(TEMP_PREFIX):
            raise InvalidKeyError(
                f"invalid {what} {original!r}: segments starting with {TEMP_PREFIX!r} are "
                "reserved for temporary files.",
                key=original,
            )


def _check_common(value: str, *, what: str) -> None:
    if value.startswith("/"):
        raise InvalidKeyError(
            f"invalid {what} {value!r}: it is absolute. Help: keys are relative to the "
            "storage root, e.g. 'a/b/c'.",
            key=value,
        )
    for char in _FORBIDDEN_CHARS:
        if char in value:
            raise InvalidKeyError(f"invalid {what} {value!r}: it contains {char!r}.", key=value)
    if not value.isascii():  # the common ASCII key skips the encode
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as err:
            raise InvalidKeyError(
                f"invalid {what} {value!r}: it is not valid Unicode ({err.reason} at "
                f"position {err.start}). Help: keys are UTF-8; remove lone surrogates.",
                key=value,
            ) from err


def check_key(key: str) -> str:
    """Return ``key`` unchanged if it is a valid object key.

    Raises:
        InvalidKeyError: empty, absolute, with empty/``.``/``..``/reserved segments, NUL,
            backslash, or not encodable as UTF-8.
    """
    if not key:
        raise InvalidKeyError("invalid key '': keys are not empty.", key=key)
    _check_common(key, what="key")
    _check_segments(key.split("/"), what="key", original=key)
    return key


def check_prefix(prefix: str) -> str:
    """Return ``prefix`` unchanged if it is a valid listing prefix.

    A prefix is a plain string prefix of keys: its last segment may be partial (``"tl/000"``)
    or empty (``"tl/"``); every complete segment before it follows the key rules.

    Raises:
        InvalidKeyError: absolute, NUL, backslash, not UTF-8, or a bad complete segment.
    """
    if not prefix:
        return prefix
    _check_common(prefix, what="prefix")
    _check_segments(prefix.split("/")[:-1], what="prefix", original=prefix)
    return prefix


def check_directory_prefix(prefix: str) -> str:
    """Return ``prefix`` if it names a directory: valid and ending in ``/``.

    Raises:
        InvalidKeyError: it does not end in ``/`` or is otherwise invalid.
    """
    if not prefix.endswith("/"):
        raise InvalidKeyError(
            f"invalid prefix {prefix!r}: it must end in '/'. Help: without it, 'job1' would "
            "also match the uploads of 'job10'.",
            key=prefix,
        )
    return check_prefix(prefix)
