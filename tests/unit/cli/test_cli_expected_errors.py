"""Every ``lakewarden`` command on bad input: one ``Error: ...`` line, no traceback.

A ``LakewardenError`` exits with status 1, a usage error with click's status 2. The table of
cases names every command; ``test_every_command_has_a_bad_input_case`` fails when a command is
added without one.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click
import pyarrow as pa
import pytest
from click.testing import CliRunner

from lakewarden.api.table import Table
from lakewarden.cli import cli

NOT_A_TABLE = "/not/a/table"

NO_BROKER = {"LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS": "127.0.0.1:1"}
INSTANT = "20240101000000000"

# (command path, arguments after it, extra environment, exit status, a fragment of the error
# line). "{corrupt}" is a state folder with a truncated stack record, "{table}" a real table.
CASES: list[tuple[str, list[str], dict[str, str], int, str]] = [
    ("errors show", [NOT_A_TABLE], {}, 1, "is not a lakewarden table"),
    ("errors show", [NOT_A_TABLE, "--instant", "notaninstant"], {}, 2, "'notaninstant' is not"),
    ("errors count", [NOT_A_TABLE], {}, 1, "is not a lakewarden table"),
    ("errors settle", [NOT_A_TABLE], {}, 1, "is not a lakewarden table"),
    ("errors count", [NOT_A_TABLE, "--instant", "2024"], {}, 2, "Invalid value for '--instant'"),
    ("dev up", ["--kafka-port", "99999"], {}, 2, "Invalid value for '--kafka-port'"),
    ("dev up", ["--state-dir", "{corrupt}"], {}, 1, "is not a stack record"),
    ("dev down", ["--state-dir", "{corrupt}"], {}, 1, "is not a stack record"),
    ("dev status", ["--state-dir", "{corrupt}"], {}, 1, "is not a stack record"),
    (
        "ingest",
        ["--topic", "t", "--table", NOT_A_TABLE, "--bootstrap", "127.0.0.1:1"],
        {},
        1,
        "is not a lakewarden table",
    ),
    ("ingest", ["--topic", "t", "--table", NOT_A_TABLE], {}, 2, "no Kafka to read from"),
    (
        "ingest",
        ["--topic", "t", "--table", NOT_A_TABLE, "--error-table", "elsewhere"],
        {},
        2,
        "Invalid value for '--error-table'",
    ),
    # issue 17: an unreachable broker fails within the client's timeout, in one line
    (
        "ingest",
        ["--topic", "t", "--table", "{table}", "--bootstrap", "127.0.0.1:1"],
        {},
        1,
        "did not answer within 1 s",
    ),
    # issue 17: a topic that would escape the state folder is a usage error
    ("ingest", ["--topic", "../../../x", "--table", NOT_A_TABLE], {}, 2, "invalid topic"),
    (
        "ingest",
        ["--topic", "t", "--table", NOT_A_TABLE, "--trigger", "soon"],
        {},
        2,
        "is not a trigger",
    ),
    ("history", [NOT_A_TABLE], NO_BROKER, 1, "is not a lakewarden table"),
    ("history", ["{table}"], {}, 1, "Kafka is not configured"),
    ("history", ["{table}"], NO_BROKER, 1, "Help: is the broker up?"),
    ("history", [NOT_A_TABLE, "--since", "bogus"], {}, 2, "Invalid value for --since"),
    ("history", [NOT_A_TABLE, "--instant", "nope"], {}, 2, "Invalid value for '--instant'"),
    ("explain", [NOT_A_TABLE, INSTANT], NO_BROKER, 1, "is not a lakewarden table"),
    ("explain", ["{table}", INSTANT], NO_BROKER, 1, "Help: is the broker up?"),
    ("explain", [NOT_A_TABLE, "notaninstant"], {}, 2, "Invalid value for 'INSTANT'"),
    ("replay", [NOT_A_TABLE], NO_BROKER, 1, "is not a lakewarden table"),
    ("replay", ["{table}"], NO_BROKER, 1, "Help: is the broker up?"),
    ("replay", [NOT_A_TABLE, "--since", "2025-99"], {}, 2, "Invalid value for --since"),
    ("replay", [NOT_A_TABLE, "--since", INSTANT, "--from-beginning"], {}, 2, "exclude each other"),
    ("timeline repair", [NOT_A_TABLE], {}, 1, "is not a lakewarden table"),
    ("clean", [NOT_A_TABLE, "--dry-run"], {}, 1, "is not a lakewarden table"),
    ("clean", [NOT_A_TABLE, "--policy", "keep-all=1"], {}, 2, "unknown cleaning policy"),
    ("clean", ["{table}", "--request"], {}, 1, "Kafka is not configured"),
    ("chart", [NOT_A_TABLE, "--out", "h.html"], NO_BROKER, 1, "is not a lakewarden table"),
    ("chart", ["{table}", "--out", "h.png"], NO_BROKER, 1, "Help: is the broker up?"),
    ("chart", [NOT_A_TABLE, "--out", "h.svg"], {}, 2, "ends in neither .html nor .png"),
    # issue 13: compaction of merge-on-read tables
    ("compact schedule", [NOT_A_TABLE], {}, 1, "is not a lakewarden table"),
    ("compact schedule", ["{table}"], {}, 1, "is copy-on-write"),
    ("compact schedule", ["{table}", "--max-file-groups", "0"], {}, 2, "--max-file-groups"),
    ("compact schedule", ["{table}", "--max-age", "soon"], {}, 2, "is not a duration"),
    ("compact schedule", ["{table}", "--max-instants", "3"], {}, 2, "need --cancellable"),
    ("compact schedule", ["{table}", "--cancellable", "--max-instants", "0"], {}, 2, "x>=1"),
    ("compact run", [NOT_A_TABLE], {}, 1, "is not a lakewarden table"),
    ("compact run", [NOT_A_TABLE, "notaninstant"], {}, 2, "Invalid value for '[INSTANT]'"),
    # issue 11 (RFC-79): clustering plans and cancels
    ("cluster schedule", [NOT_A_TABLE], {}, 1, "is not a lakewarden table"),
    ("cluster schedule", ["{table}", "--max-age", "soon"], {}, 2, "is not a duration"),
    ("cluster schedule", ["{table}", "--max-age", "2h"], {}, 2, "need --cancellable"),
    ("cluster run", ["{table}", INSTANT], {}, 1, "is not on the timeline"),
    ("cluster run", [NOT_A_TABLE, "nope"], {}, 2, "Invalid value for 'INSTANT'"),
    ("cancel", ["{table}", INSTANT], {}, 1, "is not on the timeline"),
    ("cancel", ["{table}", INSTANT, "--execute"], {}, 1, "is not on the timeline"),
    ("cancel", ["{table}", INSTANT], NO_BROKER, 1, "Help: is the broker up?"),
    ("cancel", [NOT_A_TABLE, "x"], {}, 2, "Invalid value for 'INSTANT'"),
    ("table create", ["{table}", "--record-key", "id", "--column", "id:int64"], {}, 1, "exists"),
    ("table create", ["x", "--record-key", "id", "--column", "id"], {}, 2, "is not NAME:TYPE"),
    ("table create", ["x", "--record-key", "id", "--column", "id:int65"], {}, 2, "Arrow type"),
    ("table show", [NOT_A_TABLE], {}, 1, "is not a lakewarden table"),
    ("publish enable", [NOT_A_TABLE], {}, 1, "is not a lakewarden table"),
    ("publish sync", [NOT_A_TABLE], {}, 1, "is not a lakewarden table"),
    ("publish sync", ["{table}"], {}, 1, "does not publish a Delta log"),
    ("publish status", [NOT_A_TABLE], {}, 1, "is not a lakewarden table"),
    (
        "table create",
        ["x", "--record-key", "id", "--column", "id:uint8", "--publish-delta"],
        {},
        1,
        "Delta Lake has no type for",
    ),
    ("table timeline", [NOT_A_TABLE], {}, 1, "is not a lakewarden table"),
]


@pytest.fixture
def table(tmp_path: Path) -> str:
    uri = str(tmp_path / "orders")
    Table.create(uri, name="orders", record_key="id", schema=pa.schema([("id", pa.int64())]))
    return uri


@pytest.fixture
def corrupt_state(tmp_path: Path) -> Path:
    """A state folder whose stack record was truncated."""
    (tmp_path / "stack.json").write_text('{"parts": [{"name": ')
    return tmp_path


def _leaf_commands(group: click.Group, prefix: str = "") -> set[str]:
    ctx = click.Context(group)
    names: set[str] = set()
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None, name
        path = f"{prefix}{name}"
        if isinstance(command, click.Group):
            names |= _leaf_commands(command, f"{path} ")
        else:
            names.add(path)
    return names


def test_every_command_has_a_bad_input_case() -> None:
    assert _leaf_commands(cli) <= {path for path, *_ in CASES}


@pytest.mark.parametrize(("path", "args", "env", "status", "fragment"), CASES)
def test_bad_input_is_one_error_line(
    path: str,
    args: list[str],
    env: dict[str, str],
    status: int,
    fragment: str,
    corrupt_state: Path,
    table: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS", raising=False)
    monkeypatch.setenv("LAKEWARDEN_KAFKA__REQUEST_TIMEOUT_S", "1")  # an unreachable broker
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    places = {"{corrupt}": str(corrupt_state), "{table}": table}
    argv = [*path.split(), *(places.get(a, a) for a in args)]

    result = CliRunner().invoke(cli, argv)

    assert result.exit_code == status, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.stderr
    assert fragment in errors[0]
    if status == 1:  # a LakewardenError: the message says what to do, once
        assert "Help:" in errors[0]
        assert errors[0].count("Help:") == 1
    # An expected error is not re-raised as an exception (that would be a bug: exit 1 + trace).
    assert isinstance(result.exception, SystemExit)


def test_the_installed_command_prints_no_traceback() -> None:
    """The real process (console-script entry point), not click's runner: stderr is exactly
    the one error line."""
    done = subprocess.run(
        [sys.executable, "-c", "from lakewarden.cli import main; main()"]
        + ["errors", "show", NOT_A_TABLE],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stderr.splitlines() == [
        "Error: 'file:///not/a/table' is not a lakewarden table: it has no "
        ".lakewarden/table.json. Help: check the URI, or create the table with "
        "lakewarden.Table.create."
    ]
