"""The generated reference pages of the documentation site, and the MkDocs hook that fills them.

``docs/reference/configuration.md`` and ``docs/reference/cli.md`` hold hand-written prose and a
marker line, ``<!-- generated: settings -->`` or ``<!-- generated: cli -->``; at build time
(``mkdocs build``, ``make docs``) :func:`on_page_markdown` replaces each marker with tables
made from the code itself: the pydantic-settings models (every field, its environment variable,
type, default and description) and the click commands of ``lakewarden.cli`` (every command,
its usage, arguments and options) and, on ``docs/reference/events.md`` (``<!-- generated:
events -->``), the topics and the Avro schemas in ``schemas/``; on
``docs/reference/services.md`` (``<!-- generated: metrics -->``), every service's Prometheus
metrics. So the pages cannot fall
behind the code: a new setting or option appears on the next build, and
``tests/docs/test_reference_pages.py`` fails when a setting has no description.

mkdocs.yml loads this file with ``hooks:``; it is not part of the installed package.
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import click
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from pydantic_settings import BaseSettings

SETTINGS_MARKER = "<!-- generated: settings -->"
CLI_MARKER = "<!-- generated: cli -->"
EVENTS_MARKER = "<!-- generated: events -->"
METRICS_MARKER = "<!-- generated: metrics -->"
SCHEMAS = Path(__file__).resolve().parents[1] / "schemas"


@dataclass(frozen=True, slots=True)
class SettingRow:
    """One setting as the configuration page lists it."""

    path: str  # dotted attribute path, e.g. kafka.bootstrap_servers
    env: str  # its environment variable, e.g. LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS
    type: str
    default: str
    description: str


@dataclass(frozen=True, slots=True)
class SettingsModel:
    """A pydantic-settings model documented as one section of the configuration page."""

    title: str
    import_path: str  # module:Class
    read_by: str  # who reads it, one sentence

    def load(self) -> type[BaseSettings]:
        module_name, _, class_name = self.import_path.partition(":")
        module = __import__(module_name, fromlist=[class_name])
        model = getattr(module, class_name)
        assert isinstance(model, type) and issubclass(model, BaseSettings)
        return model


# Every settings model a user or operator sets through the environment. The job-committer's
# crash hooks (lakewarden_services.job_committer.hooks) are left out: tests only.
SETTINGS_MODELS = (
    SettingsModel(
        "Clients, services and tools",
        "lakewarden.settings:Settings",
        "Every lakewarden process: `Table`, the Spark data source and its tasks, the CLI and "
        "every service. Nested settings use `__` between the levels.",
    ),
    SettingsModel(
        "Every service process",
        "lakewarden_services._common.settings:ServiceSettings",
        "Each service (`python -m lakewarden_services.<name>`), besides the settings above.",
    ),
    SettingsModel(
        "timeline-lock",
        "lakewarden_services.timeline_lock.app:LockServiceSettings",
        "The timeline-lock service, besides those of every service.",
    ),
    SettingsModel(
        "job-committer",
        "lakewarden_services.job_committer.held:HeldManifestSettings",
        "The job-committer service: how it holds the manifests TaskManifest events carry.",
    ),
    SettingsModel(
        "cleaner",
        "lakewarden_services.cleaner.settings:CleanerSettings",
        "The cleaner service.",
    ),
    SettingsModel(
        "error-sink",
        "lakewarden_services.error_sink.__main__:SinkSettings",
        "The error-sink service.",
    ),
    SettingsModel(
        "The local stack",
        "lakewarden.devstack.config:DevSettings",
        "`lakewarden dev up` and the test fixtures; each is also an option of `dev up`.",
    ),
)


def setting_rows(model: type[BaseSettings]) -> list[SettingRow]:
    """Every leaf setting of ``model``, nested models flattened in declaration order; of a
    model that extends another settings model, only the fields it adds."""
    config = model.model_config
    prefix = str(config.get("env_prefix") or "")
    delimiter = str(config.get("env_nested_delimiter") or "__")
    rows = _rows(model, path=(), env_prefix=prefix, delimiter=delimiter)
    inherited: set[str] = set()
    for base in model.__mro__[1:]:
        if isinstance(base, type) and issubclass(base, BaseSettings) and base is not BaseSettings:
            inherited.update(base.model_fields)
    return [row for row in rows if row.path.split(".")[0] not in inherited]


def _rows(
    model: type[BaseModel], *, path: tuple[str, ...], env_prefix: str, delimiter: str
) -> Iterator[SettingRow]:
    for name, field in model.model_fields.items():
        nested = _nested_model(field.annotation)
        if nested is not None:
            yield from _rows(
                nested,
                path=(*path, name),
                env_prefix=f"{env_prefix}{name.upper()}{delimiter}",
                delimiter=delimiter,
            )
            continue
        yield SettingRow(
            path=".".join((*path, name)),
            env=f"{env_prefix}{name.upper()}",
            type=type_name(field.annotation),
            default=_default(field),
            description=_description(field),
        )


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def type_name(annotation: Any) -> str:
    """A reader's name for a field type: ``float``, ``str | None``, ``"PLAIN" | "SSL"``."""
    if annotation is None or annotation is type(None):
        return "None"
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return " | ".join(json.dumps(arg) for arg in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(arg) for arg in args)
    if origin is not None:
        inner = ", ".join(type_name(arg) for arg in args)
        return f"{getattr(origin, '__name__', str(origin))}[{inner}]"
    if isinstance(annotation, type):
        if issubclass(annotation, BaseModel):
            return f"{annotation.__name__} (JSON)"
        return annotation.__name__
    return str(annotation)


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, SecretStr):
        return "(secret)"
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    if isinstance(value, dict | list):
        return json.dumps(value, default=str)
    return str(value)


def _description(field: FieldInfo) -> str:
    text = " ".join((field.description or "").split())
    bounds = [_bound(item) for item in field.metadata]
    shown = [bound for bound in bounds if bound]
    if shown:
        text = f"{text} ({', '.join(shown)})" if text else ", ".join(shown)
    return text


_BOUNDS = {"gt": ">", "ge": "≥", "lt": "<", "le": "≤", "min_length": "length ≥"}


def _bound(item: object) -> str | None:
    for attribute, sign in _BOUNDS.items():
        value = getattr(item, attribute, None)
        if value is not None:
            return f"{sign} {value}"
    return None


def settings_markdown() -> str:
    """The configuration page's generated part: one table per settings model."""
    parts: list[str] = []
    for spec in SETTINGS_MODELS:
        model = spec.load()
        parts.append(f"## {spec.title}\n")
        parts.append(f"{spec.read_by} Model: `{spec.import_path.replace(':', '.')}`.\n")
        parts.append("| setting | environment variable | type | default | description |")
        parts.append("|---|---|---|---|---|")
        for row in setting_rows(model):
            cells = (
                f"`{row.path}`",
                f"`{row.env}`",
                _cell(row.type),
                _cell(row.default, code=True),
                _cell(row.description),
            )
            parts.append("| " + " | ".join(cells) + " |")
        parts.append("")
    return "\n".join(parts)


def _cell(text: str, *, code: bool = False) -> str:
    if code and text not in ("unset", "required", "(secret)", ""):
        return "`" + text.replace("|", "\\|") + "`"
    return _md(text)


# -- the command line -----------------------------------------------------------------------


def cli_markdown() -> str:
    """The command-line page's generated part: every command of ``lakewarden``, depth first."""
    from lakewarden.cli import cli

    ctx = click.Context(cli, info_name="lakewarden")
    return "\n".join(_command_sections(cli, ctx, ("lakewarden",)))


def _command_sections(
    command: click.Command, ctx: click.Context, names: tuple[str, ...]
) -> Iterator[str]:
    level = min(len(names) + 1, 4)
    yield f"{'#' * level} `{' '.join(names)}`\n"
    help_text = (command.help or "").strip()
    if help_text:
        yield _help_paragraphs(help_text) + "\n"
    usage = " ".join(command.collect_usage_pieces(ctx))
    yield f"```text\n{' '.join(names)} {usage}\n```\n"
    rows = [_param_row(param, ctx) for param in command.get_params(ctx)]
    rows = [row for row in rows if row is not None]
    if rows:
        yield "| argument or option | type | default | description |"
        yield "|---|---|---|---|"
        yield from rows
        yield ""
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is None or sub.hidden:
                continue
            sub_ctx = click.Context(sub, info_name=name, parent=ctx)
            yield from _command_sections(sub, sub_ctx, (*names, name))


def _help_paragraphs(text: str) -> str:
    # click's \b marks a paragraph not to rewrap: keep its lines as lines.
    blocks = []
    for block in text.split("\n\n"):
        if block.lstrip().startswith("\b"):
            lines = [line for line in block.splitlines()[1:] if line.strip()]
            blocks.append("\n".join(f"    {line.strip()}" for line in lines))
        else:
            blocks.append(_md(block))
    return "\n\n".join(blocks)


def _param_row(param: click.Parameter, ctx: click.Context) -> str | None:
    if isinstance(param, click.Option):
        if param.hidden or param.name == "help":
            return None
        names = ", ".join(f"`{opt}`" for opt in (*param.opts, *param.secondary_opts))
        description = param.help or ""
    else:
        names = f"`{param.human_readable_name}`"
        description = "argument" + ("" if param.required else " (optional)")
    kind = "flag" if isinstance(param, click.Option) and param.is_flag else param.type.name
    if isinstance(param.type, click.Choice):
        kind = " \\| ".join(str(choice) for choice in param.type.choices)
    default = param.get_default(ctx, call=True)
    unset = default in (None, (), False) or repr(default).startswith("Sentinel.")
    shown = "" if unset or isinstance(param, click.Argument) else f"`{default}`"
    return f"| {names} | {kind} | {shown} | {_md(description)} |"


# -- the events ----------------------------------------------------------------------------


def events_markdown(schemas: Path = SCHEMAS) -> str:
    """The events page's generated part: the topics, then every event's schema and fields."""
    from lakewarden.events import TOPICS
    from lakewarden.settings import Settings

    settings = Settings()
    parts = [
        "## Topics\n",
        "| topic | partitions | retention | cleanup | events |",
        "|---|---|---|---|---|",
    ]
    for spec in TOPICS:
        events = ", ".join(f"`{event}`" for event in spec.events)
        parts.append(
            f"| `{spec.name(settings)}` | {spec.partitions} | {_retention(spec.retention_ms)} "
            f"| {spec.cleanup_policy} | {events} |"
        )
    parts.append("")
    for path in sorted(schemas.glob("*.avsc")):
        schema = json.loads(path.read_text())
        parts.append(f"## {schema['name']}\n")
        parts.append(
            f"{_md(schema.get('doc', ''))} (`schemas/{path.name}`, version "
            f"{schema.get('version', '?')})\n"
        )
        parts.append("| field | type | description |")
        parts.append("|---|---|---|")
        for field in schema.get("fields", []):
            kind, doc = _md(_avro_type(field["type"])), _md(field.get("doc", ""))
            parts.append(f"| `{field['name']}` | {kind} | {doc} |")
        parts.append("")
    return "\n".join(parts)


def _retention(ms: int) -> str:
    if ms < 0:
        return "forever"
    hours = ms / 3_600_000
    return f"{hours:g} h" if hours < 24 else f"{hours / 24:g} days"


def _avro_type(avro: Any) -> str:
    if isinstance(avro, str):
        return avro.removeprefix("lakewarden.")
    if isinstance(avro, list):
        return " | ".join(_avro_type(branch) for branch in avro)
    kind = avro.get("type")
    if kind == "enum":
        return "enum " + " / ".join(avro.get("symbols", []))
    if kind == "array":
        return f"array<{_avro_type(avro['items'])}>"
    if kind == "map":
        return f"map<{_avro_type(avro['values'])}>"
    if kind == "record":
        return f"record {avro.get('name', '')}"
    return _avro_type(kind) + (f" ({avro['logicalType']})" if "logicalType" in avro else "")


def _md(text: str) -> str:
    """``text`` as one table cell: one line, pipes escaped, ``<name>`` shown, not taken as HTML."""
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# -- the services' metrics -------------------------------------------------------------------

SERVICES = (
    "timeline_lock",
    "heartbeat_monitor",
    "job_committer",
    "error_sink",
    "cleaner",
    "cancel_manager",
    "publisher",
)


def metrics_markdown() -> str:
    """Every Prometheus metric each service's ``metrics`` module declares."""
    import importlib

    from prometheus_client.metrics import MetricWrapperBase

    parts = []
    for service in SERVICES:
        module = importlib.import_module(f"lakewarden_services.{service}.metrics")
        rows = []
        for value in vars(module).values():
            if not isinstance(value, MetricWrapperBase):
                continue
            for family in value.describe():
                name = family.name + ("_total" if family.type == "counter" else "")
                labels = ", ".join(getattr(value, "_labelnames", ()))
                shown = f"`{name}{{{labels}}}`" if labels else f"`{name}`"
                rows.append(f"| {shown} | {family.type} | {_md(family.documentation)} |")
        parts.append(f"### {service.replace('_', '-')}\n")
        parts.append("| metric | type | meaning |")
        parts.append("|---|---|---|")
        parts.extend(sorted(set(rows), key=rows.index))
        parts.append("")
    return "\n".join(parts)


# -- the MkDocs hook ------------------------------------------------------------------------

_GENERATORS = {
    SETTINGS_MARKER: settings_markdown,
    CLI_MARKER: cli_markdown,
    EVENTS_MARKER: events_markdown,
    METRICS_MARKER: metrics_markdown,
}


def fill(markdown: str) -> str:
    """``markdown`` with every generation marker replaced by its generated text."""
    for marker, generate in _GENERATORS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, generate())
    return markdown


def on_page_markdown(markdown: str, **_: Any) -> str:
    """MkDocs hook: fill the generated parts of a page before it is rendered."""
    return fill(markdown)


if __name__ == "__main__":  # print a page as the site shows it: python tools/docs_reference.py
    import sys

    for name in sys.argv[1:]:
        print(fill(Path(name).read_text()))
