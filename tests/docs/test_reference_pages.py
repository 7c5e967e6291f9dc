"""The generated reference pages (tools/docs_reference.py): complete, described, filled."""

from __future__ import annotations

import sys
from pathlib import Path

import click
import pytest
from pydantic import BaseModel

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from lakewarden.settings import Settings  # noqa: E402
from tools import docs_reference  # noqa: E402
from tools.docs_reference import SETTINGS_MODELS, fill, setting_rows  # noqa: E402


@pytest.mark.parametrize("spec", SETTINGS_MODELS, ids=lambda spec: spec.title)
def test_every_setting_is_described(spec: docs_reference.SettingsModel) -> None:
    undescribed = [row.env for row in setting_rows(spec.load()) if not row.description]
    assert not undescribed, (
        f"settings without a description (Field(description=...)): {undescribed}"
    )


def test_nested_settings_are_flattened_with_their_environment_names() -> None:
    rows = {row.env: row for row in setting_rows(Settings)}
    assert rows["LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS"].type == "str | None"
    assert rows["LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS"].default == "unset"
    assert rows["LAKEWARDEN_HEARTBEAT__INTERVAL_S"].default == "10.0"
    assert "> 0" in rows["LAKEWARDEN_HEARTBEAT__INTERVAL_S"].description
    assert rows["LAKEWARDEN_KAFKA__SECURITY_PROTOCOL"].type.startswith('"PLAINTEXT" | "SSL"')
    assert rows["LAKEWARDEN_ERROR_TABLE__ENABLED"].default == "false"
    # Every leaf of the model is listed: count them independently of the generator.
    settings = Settings()
    nested = [getattr(settings, name) for name in Settings.model_fields]
    leaves = sum(
        len(type(value).model_fields) if isinstance(value, BaseModel) else 1 for value in nested
    )
    assert len(rows) == leaves


def test_an_inherited_model_lists_only_its_own_settings() -> None:
    lock = next(spec for spec in SETTINGS_MODELS if spec.title == "timeline-lock")
    assert [row.env for row in setting_rows(lock.load())] == [
        "LAKEWARDEN_LOCK_CHANGELOG_INTERVAL_S"
    ]


def test_the_configuration_page_is_filled_with_every_setting() -> None:
    page = (REPO / "docs/reference/configuration.md").read_text()
    assert docs_reference.SETTINGS_MARKER in page
    filled = fill(page)
    assert docs_reference.SETTINGS_MARKER not in filled
    for spec in SETTINGS_MODELS:
        for row in setting_rows(spec.load()):
            assert f"`{row.env}`" in filled


def test_the_cli_page_is_filled_with_every_command() -> None:
    from lakewarden.cli import cli

    page = (REPO / "docs/reference/cli.md").read_text()
    assert docs_reference.CLI_MARKER in page
    filled = fill(page)
    ctx = click.Context(cli, info_name="lakewarden")
    for name in cli.list_commands(ctx):
        command = cli.get_command(ctx, name)
        assert f"`lakewarden {name}`" in filled
        if isinstance(command, click.Group):
            for sub in command.list_commands(ctx):
                assert f"`lakewarden {name} {sub}`" in filled
    assert "`--bad-records`" in filled and "fail \\| skip \\| error-table" in filled
