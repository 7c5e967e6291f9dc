"""Session fixtures that run a real Kafka broker and a real S3 endpoint for the tests.

Each is started lazily, the first time a test asks for it, on free ephemeral ports bound to
127.0.0.1 with its files in the session's pytest temp dir, and stopped by pid at session end.
So several people (or CI and a person) can run the suite on one machine at the same time.

- ``kafka_bootstrap``: ``"127.0.0.1:<port>"`` of a single-node KRaft broker
- ``kafka_settings``: ``Settings`` with ``kafka.bootstrap_servers`` pointing at it
- ``s3_settings``: ``Settings`` with ``s3.endpoint_url`` and credentials of a SeaweedFS
- ``s3_bucket``: the name of a bucket created on that endpoint for this session
- ``job_committer``: module-scoped; ``job_committer.ensure(settings)`` runs a job-committer for
  those settings' topics (``Table.write`` with Kafka configured commits through it)

A missing prerequisite (Kafka jars, ``weed``) FAILS the test with what to run, it never skips:
a suite that silently skips its integration tests proves nothing.

Tests that use these fixtures get the ``kafka`` / ``s3`` marker automatically, so
``pytest -m 'not kafka'`` selects the tests that need no broker.

Hypothesis runs with the profile ``_hypothesis_profiles`` selects: derandomized when
``CI=true``, random otherwise, ``HYPOTHESIS_PROFILE=fuzz`` for long random runs (``make fuzz``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from _hypothesis_profiles import load_profile
from _job_committers import JobCommitters
from pydantic import SecretStr

from lakewarden.devstack import processes
from lakewarden.devstack.errors import DevStackError
from lakewarden.devstack.kafka import KafkaBroker
from lakewarden.devstack.s3 import SeaweedS3, weed_binary
from lakewarden.settings import KafkaSettings, S3Settings, Settings

_KAFKA_FIXTURES = {"kafka_broker", "kafka_bootstrap", "kafka_settings"}
_S3_FIXTURES = {"seaweed_s3", "s3_settings", "s3_bucket"}
TEST_BUCKET = "lakewarden-tests"

# At import, before any test module is imported: settings decorators read the loaded profile.
load_profile()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if names & _KAFKA_FIXTURES:
            item.add_marker(pytest.mark.kafka)
        if names & _S3_FIXTURES:
            item.add_marker(pytest.mark.s3)


def _require(what: str, check: Callable[[], object]) -> None:
    try:
        check()
    except DevStackError as err:  # fail, never skip: a skipped integration suite proves nothing
        pytest.fail(f"{what} missing: {err}", pytrace=False)


_Server = TypeVar("_Server", KafkaBroker, SeaweedS3)


def _start_with_retry(what: str, make: Callable[[], _Server], attempts: int = 3) -> _Server:
    """Start a server on fresh free ports, retrying when a start fails.

    A port found free can be taken (by any process's outgoing connection, say) before the
    server binds it; new ports on the next attempt make that race harmless. Prerequisites
    (jars, binaries) are checked by the caller first: retrying cannot fix them.
    """
    for attempt in range(1, attempts + 1):
        server = make()
        try:
            server.start()
            return server
        except DevStackError as err:
            if attempt == attempts:
                pytest.fail(f"cannot start {what}: {err}", pytrace=False)
    raise AssertionError("unreachable")


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """A running broker for the whole session (stopped by pid at the end)."""
    home = tmp_path_factory.mktemp("kafka")

    def make() -> KafkaBroker:
        return KafkaBroker(
            home=home, port=processes.free_port(), controller_port=processes.free_port()
        )

    _require("Kafka jars", make().check_jars)
    broker = _start_with_retry("the test Kafka broker", make)
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_broker: KafkaBroker) -> str:
    """``"127.0.0.1:<port>"`` of the session's broker."""
    return kafka_broker.bootstrap


@pytest.fixture(scope="session")
def kafka_settings(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """Settings pointing at the session's broker (state dir in the session's temp dir)."""
    return Settings(
        kafka=KafkaSettings(bootstrap_servers=kafka_bootstrap),
        state_dir=tmp_path_factory.mktemp("state"),
    )


@pytest.fixture(scope="session")
def seaweed_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedS3]:
    """A running SeaweedFS S3 endpoint for the whole session (stopped by pid at the end)."""
    home = tmp_path_factory.mktemp("seaweedfs")

    def make() -> SeaweedS3:
        # The dev stack's well-known credentials (SeaweedS3's defaults); s3_settings hands
        # them to the tests explicitly, as settings have no default credentials.
        return SeaweedS3(home=home, port=processes.free_port(), region=S3Settings().region)

    _require("SeaweedFS", weed_binary)
    endpoint = _start_with_retry("the test S3 endpoint (SeaweedFS)", make)
    try:
        yield endpoint
    finally:
        endpoint.stop()


@pytest.fixture(scope="session")
def s3_settings(seaweed_s3: SeaweedS3, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """Settings pointing at the session's S3 endpoint, with its credentials."""
    return Settings(
        s3=S3Settings(
            endpoint_url=seaweed_s3.endpoint_url,
            region=seaweed_s3.region,
            access_key_id=SecretStr(seaweed_s3.access_key),
            secret_access_key=SecretStr(seaweed_s3.secret_key),
        ),
        state_dir=tmp_path_factory.mktemp("state"),
    )


@pytest.fixture(scope="session")
def s3_bucket(seaweed_s3: SeaweedS3) -> str:
    """A bucket created on the session's S3 endpoint (shared by the session's tests: use
    per-test key prefixes, e.g. from ``tmp_path.name``, to keep tests apart)."""
    try:
        seaweed_s3.create_bucket(TEST_BUCKET)
    except DevStackError as err:
        pytest.fail(str(err), pytrace=False)
    return TEST_BUCKET


@pytest.fixture
def repo_root() -> Path:
    """The repository root (for tests that read infra/ or schemas/)."""
    return Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module", autouse=True)
def _close_shared_kafka_clients() -> Iterator[None]:
    """Close the process-wide connections (``Table.open(uri)`` with Kafka settings takes one,
    with its lock client and heartbeat emitter) at the end of every module, so none is left
    polling a broker that the session stops first (reconnect errors in the logs). A no-op
    where none was opened."""
    yield
    from lakewarden.table import close_shared_connections

    close_shared_connections()


@pytest.fixture(scope="module")
def job_committer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JobCommitters]:
    """job-committer processes for this module, one per topic prefix, started on demand by
    ``ensure(settings)`` and stopped (by pid) at the end of the module."""
    committers = JobCommitters(tmp_path_factory.mktemp("job-committers"))
    try:
        yield committers
    finally:
        committers.stop_all()
