"""What only the S3 backend does: error translation, lazy clients, unsupported operations."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError
from pydantic import SecretStr

from lakewarden.settings import S3Settings
from lakewarden.storage import (
    AlreadyExistsError,
    InvalidKeyError,
    NotFoundError,
    RequestRejectedError,
    StorageError,
    StorageIOError,
    UnsupportedOperationError,
)
from lakewarden.storage.s3 import S3Storage, _translate


def _client_error(code: str, status: int) -> ClientError:
    response: Any = {
        "Error": {"Code": code, "Message": f"message of {code}"},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(response, "PutObject")


@pytest.mark.parametrize(
    ("code", "status", "conditional", "expected"),
    [
        ("PreconditionFailed", 412, True, AlreadyExistsError),
        ("ConditionalRequestConflict", 409, True, AlreadyExistsError),
        ("NoSuchKey", 404, False, NotFoundError),
        ("404", 404, False, NotFoundError),  # HEAD has no body, only the status
        ("NoSuchUpload", 404, True, NotFoundError),
        ("InternalError", 500, False, StorageIOError),
        ("ServiceUnavailable", 503, True, StorageIOError),
        ("SlowDown", 503, False, StorageIOError),
        ("AccessDenied", 403, False, RequestRejectedError),
        ("NoSuchBucket", 404, False, RequestRejectedError),
        ("InvalidPart", 400, True, RequestRejectedError),
        # Only a conditional request can lose a race; elsewhere a 412 is a refused request.
        ("PreconditionFailed", 412, False, RequestRejectedError),
    ],
)
def test_error_translation(
    code: str, status: int, conditional: bool, expected: type[StorageError]
) -> None:
    err = _translate(_client_error(code, status), "put_object", "k", conditional=conditional)
    assert type(err) is expected
    assert err.key == "k"
    assert code in str(err)


def test_connection_errors_are_io_errors() -> None:
    err = _translate(EndpointConnectionError(endpoint_url="http://x"), "get_object", "k")
    assert type(err) is StorageIOError
    assert "Could not connect" in str(err)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_construction_does_no_network_io_and_hides_credentials() -> None:
    settings = S3Settings(
        endpoint_url=f"http://127.0.0.1:{_closed_port()}",
        access_key_id=SecretStr("AKIA-visible"),
        secret_access_key=SecretStr("very-secret"),
    )
    storage = S3Storage("bucket", "/tables/t1/", settings)  # nothing listens: no error yet
    assert storage.uri == "s3://bucket/tables/t1"
    assert "very-secret" not in repr(storage) and "AKIA" not in repr(storage)
    # The first request fails as an outcome-unknown I/O error (not retried: conditional).
    with pytest.raises(StorageIOError, match="S3 put_object of 'k' failed"):
        storage.write_if_absent("k", b"x")


def test_rename_and_append_are_unsupported() -> None:
    storage = S3Storage("bucket", "t", S3Settings())
    with pytest.raises(UnsupportedOperationError, match="S3 has no rename") as info:
        storage.rename("a", "b")
    assert info.value.key == "a"
    with pytest.raises(UnsupportedOperationError, match="cannot be appended"):
        storage.append("a", b"x")
    assert storage.local_path("a") is None


def test_invalid_prefix_is_refused() -> None:
    with pytest.raises(InvalidKeyError, match="invalid key 'a/../b'"):
        S3Storage("bucket", "a/../b", S3Settings())
