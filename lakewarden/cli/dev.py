"""``lakewarden dev up|down|status``: the local stack (Kafka, optionally S3, the services).

Defaults come from ``LAKEWARDEN_DEV__*`` (:class:`lakewarden.devstack.DevSettings`) and the
state folder from ``LAKEWARDEN_STATE_DIR`` (``.lakewarden-state``); options override both.
A port of 0 picks a free ephemeral port.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table

from lakewarden.devstack import SERVICES, DevSettings, DevStack, PartHealth
from lakewarden.settings import Settings

F = TypeVar("F", bound=Callable[..., Any])


def _state_dir_option(func: F) -> F:
    return click.option(
        "--state-dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help="State folder (pid files, logs, data). Default: LAKEWARDEN_STATE_DIR or "
        ".lakewarden-state.",
    )(func)


def _stack(state_dir: Path | None) -> DevStack:
    settings = Settings()
    return DevStack(state_dir or settings.state_dir, settings)


@click.group()
def dev() -> None:
    """Run the local stack: a Kafka broker, optionally S3 (SeaweedFS), and the services."""


@dev.command()
@_state_dir_option
@click.option("--s3/--no-s3", "with_s3", default=False, help="Also run S3 (SeaweedFS).")
@click.option(
    "--kafka-port", type=click.IntRange(0, 65535), default=None, help="Broker port. [9092]"
)
@click.option(
    "--kafka-controller-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="KRaft controller port. [9093]",
)
@click.option("--s3-port", type=click.IntRange(0, 65535), default=None, help="S3 API port. [8333]")
@click.option("--bucket", default=None, help="Bucket to create on S3. [lakewarden]")
@click.option(
    "--brokers",
    type=click.IntRange(1, 5),
    default=None,
    help="Kafka nodes: 3 runs a KRaft cluster (replication 3, min.insync.replicas 2). [1]",
)
def up(
    state_dir: Path | None,
    with_s3: bool,
    kafka_port: int | None,
    kafka_controller_port: int | None,
    s3_port: int | None,
    bucket: str | None,
    brokers: int | None,
) -> None:
    """Start Kafka, the topics, S3 (with --s3) and every service not running yet."""
    overrides: dict[str, Any] = {
        "kafka_port": kafka_port,
        "kafka_controller_port": kafka_controller_port,
        "s3_port": s3_port,
        "bucket": bucket,
        "brokers": brokers,
    }
    dev_settings = DevSettings(**{k: v for k, v in overrides.items() if v is not None})
    stack = _stack(state_dir)
    record = stack.up(dev=dev_settings, with_s3=with_s3, services=list(SERVICES))
    console = Console()
    console.print(f"[green]stack up[/green] in {stack.state_dir} ({len(record.parts)} parts)")
    console.print(f"export LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS={record.bootstrap_servers}")
    if record.s3_endpoint_url is not None:
        console.print(f"export LAKEWARDEN_S3__ENDPOINT_URL={record.s3_endpoint_url}")
        # The local endpoint's well-known pair (settings have no default credentials).
        access_key, secret_key = stack.s3_credentials()
        console.print(f"export LAKEWARDEN_S3__ACCESS_KEY_ID={access_key}")
        console.print(f"export LAKEWARDEN_S3__SECRET_ACCESS_KEY={secret_key}")


@dev.command()
@_state_dir_option
def down(state_dir: Path | None) -> None:
    """Stop exactly what `dev up` started (by its pid files) and remove the pid files."""
    stack = _stack(state_dir)
    stopped = stack.down()
    Console().print(f"stack down: stopped {', '.join(stopped) if stopped else 'nothing'}")


@dev.command()
@_state_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def status(state_dir: Path | None, as_json: bool) -> None:
    """Show each part's health. Exits 1 unless every part is healthy (0 parts: exit 1)."""
    parts = _stack(state_dir).status()
    if as_json:
        rows = [{**vars(part), "log_file": str(part.log_file)} for part in parts]
        click.echo(json.dumps(rows, indent=2))
    else:
        _print_table(parts)
    if not parts or not all(part.healthy for part in parts):
        sys.exit(1)


def _print_table(parts: list[PartHealth]) -> None:
    console = Console()
    if not parts:
        console.print("stack is down (nothing recorded in the state folder)")
        return
    table = Table(title="lakewarden dev stack")
    for column in ("part", "pid", "process", "port", "answering", "log"):
        table.add_column(column)
    for part in parts:
        table.add_row(
            part.name,
            str(part.pid),
            "[green]alive[/green]" if part.alive else "[red]dead[/red]",
            f"127.0.0.1:{part.port}",
            "[green]yes[/green]" if part.answering else "[red]no[/red]",
            str(part.log_file),
        )
    console.print(table)


command = dev
