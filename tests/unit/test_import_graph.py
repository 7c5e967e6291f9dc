"""The modules of ``lakewarden/`` import each other without a cycle.

A static walk (``ast``), so it sees every module, not only those a test happened to import.
Counted: the imports that run when a module is imported (module level, class bodies, ``if`` /
``try`` blocks), except those under ``if TYPE_CHECKING:``. Imports inside functions run later
and are not cycles at import time. Importing ``a.b.c`` also runs ``a/__init__`` and
``a/b/__init__``, so those packages are edges too, except the importer's own ancestors
(already being imported when the importer runs).
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import lakewarden

ROOT = Path(lakewarden.__file__).parent
PACKAGE = "lakewarden"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_time_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements that run at import time (functions' bodies excluded)."""
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        yield node
        if isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _import_time_statements(node.body)
            yield from _import_time_statements(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody):
                yield from _import_time_statements(block)
            for handler in node.handlers:
                yield from _import_time_statements(handler.body)
        elif isinstance(node, ast.With | ast.ClassDef):
            yield from _import_time_statements(node.body)


def _imported_names(module: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    for node in _import_time_statements(tree.body):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                if not is_package:
                    anchor = anchor[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            yield base
            for alias in node.names:  # `from pkg import submodule`
                if f"{base}.{alias.name}" in known:
                    yield f"{base}.{alias.name}"


def _edges(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    own_ancestors = {".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)}
    targets: set[str] = set()
    for name in _imported_names(module, path, known):
        if name != PACKAGE and not name.startswith(PACKAGE + "."):
            continue
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # the module and the packages it runs first
            candidate = ".".join(parts[:i])
            if candidate in known and candidate not in own_ancestors and candidate != module:
                targets.add(candidate)
    return targets


def import_graph() -> dict[str, set[str]]:
    known = _modules()
    return {module: _edges(module, path, known) for module, path in known.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (as the path that closes it), or None."""
    done: set[str] = set()
    on_path: list[str] = []

    def visit(node: str) -> list[str] | None:
        if node in on_path:
            return [*on_path[on_path.index(node) :], node]
        if node in done:
            return None
        on_path.append(node)
        for target in sorted(graph.get(node, ())):
            cycle = visit(target)
            if cycle is not None:
                return cycle
        on_path.pop()
        done.add(node)
        return None

    for start in sorted(graph):
        cycle = visit(start)
        if cycle is not None:
            return cycle
    return None


def test_the_finder_sees_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_the_walk_sees_the_edges_it_must() -> None:
    graph = import_graph()
    kafka = graph["lakewarden.clients.kafka_coordinator"]
    assert {"lakewarden.table.coordinator", "lakewarden.table"} <= kafka  # the package runs first
    assert "lakewarden.clients" not in kafka  # its own package is being imported already
    assert "lakewarden.commit.attempt" in graph["lakewarden.commit"]  # __init__ re-exports
    # A lazy surface (``lakewarden._lazy``) imports its modules on first use, not at import.
    assert "lakewarden._lazy" in graph["lakewarden.table"]
    assert "lakewarden.api.table" not in graph["lakewarden.table"]


def test_lakewarden_has_no_import_cycle() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def _every_imported_name(path: Path) -> Iterator[tuple[int, str]]:
    """Every module name ``path`` imports, anywhere (functions and ``TYPE_CHECKING`` included)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            yield node.lineno, node.module


def services_imports(root: Path) -> list[str]:
    """Where a module under ``root`` imports the services package, as ``path:line name``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for lineno, name in _every_imported_name(path):
            if name.split(".")[0] in ("lakewarden_services", "services"):
                found.append(f"{path.relative_to(root.parent)}:{lineno} {name}")
    return found


def test_the_services_walk_sees_a_function_level_import(tmp_path: Path) -> None:
    package = tmp_path / "lib"
    package.mkdir()
    (package / "a.py").write_text(
        "def later() -> None:\n    from lakewarden_services.x.state import apply\n"
    )
    (package / "b.py").write_text("import lakewarden.lock\n")
    assert services_imports(package) == ["lib/a.py:2 lakewarden_services.x.state"]


def test_the_library_never_imports_the_services_package() -> None:
    """Services build on the library, never the reverse: no module of ``lakewarden/`` imports
    ``lakewarden_services`` (or ``services``), at module level or inside a function."""
    assert services_imports(ROOT) == []


def test_services_import_only_public_library_modules() -> None:
    """A private module (``_name``) of the library is its own business: services use what the
    library exports (``lakewarden.clients``, ``lakewarden.logfmt``, ...)."""
    services = ROOT.parent / "services"
    private = []
    for path in sorted(services.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                parts = name.split(".")
                if parts[0] == PACKAGE and any(p.startswith("_") for p in parts[1:]):
                    private.append(f"{path.relative_to(services.parent)}:{node.lineno} {name}")
    assert private == []


# Replay's fast path (a fold of the common case beside the state machine, a reader that folds
# whole consume batches, a process that validates payloads): behind ``TopicReplay`` and
# ``replay_timeline`` alone, and checked against the state machine by property tests
# (``tests/unit/table/test_replay_fold.py``, ``tests/unit/history/test_lean_fold.py``).
REPLAY_FAST_PATH = {
    "lakewarden.history._lean_fold",
    "lakewarden.history._message_fold",
    "lakewarden.history._replay_read",
    "lakewarden.history._validate",
}
REPLAY_BOUNDARY = {"lakewarden.history", "lakewarden.history.replay"}


def test_replays_fast_path_is_reached_only_through_its_boundary() -> None:
    graph = import_graph()
    assert REPLAY_FAST_PATH <= graph.keys()
    outside = sorted(
        f"{module} imports {target}"
        for module, targets in graph.items()
        if module not in REPLAY_FAST_PATH | REPLAY_BOUNDARY
        for target in targets & REPLAY_FAST_PATH
    )
    assert outside == []


def test_the_table_and_the_clients_import_together_in_a_fresh_process() -> None:
    subprocess.run(
        [sys.executable, "-c", "import lakewarden.table, lakewarden.clients"],
        check=True,
        cwd=ROOT.parent,
    )


@pytest.mark.parametrize(
    "package", ["lakewarden.table", "lakewarden.table.clean", "lakewarden.spark"]
)
def test_every_name_of_a_lazy_surface_resolves(package: str) -> None:
    module = importlib.import_module(package)
    for name in module.__all__:
        assert getattr(module, name) is not None, name
    assert set(module.__all__) <= set(dir(module))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        module.nope  # noqa: B018


def test_a_spark_task_worker_imports_no_reader_cleaner_or_event_layer() -> None:
    """What a fresh PySpark worker imports to unpickle the writer (``lakewarden.spark._writer``)
    leaves out what a task does not run: each of these would cost every fresh worker CPU."""
    heavy = [
        "pandas",
        "pyarrow.dataset",
        "lakewarden.api.clean",
        "lakewarden.api.table",
        "lakewarden.spark._helper",
        "lakewarden.spark._job",
        "confluent_kafka",
        "lakewarden.errortable",
    ]
    probe = (
        "import sys, lakewarden.spark._writer; "
        f"print(','.join(m for m in {heavy!r} if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], check=True, cwd=ROOT.parent, capture_output=True, text=True
    )
    assert done.stdout.strip() == ""


# The layers of ``lakewarden/``, top first. A module belongs to the layer of the longest
# prefix that names it. A module imports only from its own layer or a layer below it: at
# module level, inside functions, under ``if TYPE_CHECKING:`` and through a package's lazy
# surface (``lakewarden._lazy``: ``from lakewarden.table import Table`` is an import of the
# module that defines ``Table``). Within a layer anything goes (the cycle test above still
# holds for what runs at import time).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "entry points",
        (
            "lakewarden.cli",
            "lakewarden.demo",
            "lakewarden._demo_show",
            "lakewarden._demo_writer",
            "lakewarden.devstack",
        ),
    ),
    ("spark", ("lakewarden.spark",)),
    ("replay", ("lakewarden.history",)),
    ("user-facing table and wiring", ("lakewarden", "lakewarden.api")),
    ("lock state", ("lakewarden.lock",)),
    ("clients", ("lakewarden.clients",)),
    ("table services", ("lakewarden.tableservice",)),
    ("error table", ("lakewarden.errortable",)),
    ("test harness", ("lakewarden.testing",)),
    ("opened table", ("lakewarden.handle",)),
    ("publishing", ("lakewarden.publish",)),
    ("table core", ("lakewarden.table",)),
    ("events", ("lakewarden.events",)),
    ("commit protocol and log files", ("lakewarden.commit", "lakewarden.logfile")),
    ("storage", ("lakewarden.storage",)),
    (
        "foundations",
        (
            "lakewarden.settings",
            "lakewarden.errors",
            "lakewarden.clock",
            "lakewarden.extras",
            "lakewarden.names",
            "lakewarden.logfmt",
            "lakewarden._lazy",
        ),
    ),
)

# A lower package's lazy surface (and its ``TYPE_CHECKING`` block) may name a module above it
# only here, for user-facing names: ``from lakewarden.table import Table`` is how users and the
# docs reach the table, and the name resolves on first use by them. Library code below the
# user-facing layer that imports one of these names is still reported (the import is judged by
# the module that defines the name).
PUBLIC_ALIASES: frozenset[tuple[str, str]] = frozenset(
    {
        ("lakewarden.table", "lakewarden.api.table"),
        ("lakewarden.table", "lakewarden.api.connection"),
        ("lakewarden.table", "lakewarden.api.clean"),
    }
)


def layer_of(module: str) -> int:
    """The index in ``LAYERS`` (0 is the top) of the layer that holds ``module`` (``lakewarden``
    alone names the root package, not everything in it)."""
    best, found = -1, None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            inside = prefix != PACKAGE and module.startswith(prefix + ".")
            if (module == prefix or inside) and len(prefix) > best:
                best, found = len(prefix), index
    assert found is not None, f"{module} is in no layer: add it to LAYERS"
    return found


def _lazy_exports(path: Path) -> dict[str, str]:
    """A lazy surface's ``_EXPORTS`` (public name -> defining module), read from its source."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        if isinstance(target, ast.Name) and target.id == "_EXPORTS":
            value = ast.literal_eval(node.value)  # type: ignore[union-attr, arg-type]
            assert isinstance(value, dict)
            return {str(k): str(v) for k, v in value.items()}
    return {}


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The known module ``name`` is or is inside (``pkg.mod.attr`` -> ``pkg.mod``)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in known:
            return candidate
        parts.pop()
    return None


def every_import(
    module: str, path: Path, known: dict[str, Path], lazy: dict[str, dict[str, str]]
) -> Iterator[tuple[int, str]]:
    """Every ``lakewarden`` module that ``module`` imports anywhere (module level, functions,
    ``TYPE_CHECKING``), with the line; a name taken from a lazy surface counts as an import
    of the module that defines it, and a lazy surface's own exports count as its imports."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                if not is_package:
                    anchor = anchor[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            surface = lazy.get(base, {})
            plain = [a.name for a in node.names if a.name not in surface]
            if plain or not node.names:
                yield node.lineno, base
            for alias in node.names:
                if alias.name in surface:
                    yield node.lineno, surface[alias.name]
                elif f"{base}.{alias.name}" in known:
                    yield node.lineno, f"{base}.{alias.name}"
    for target in lazy.get(module, {}).values():
        yield 0, target


def upward_imports(root: Path = ROOT) -> list[str]:
    """Every import of a module from a layer above its own, as ``path:line module -> target``."""
    known = _modules()
    lazy = {module: _lazy_exports(path) for module, path in known.items()}
    found = []
    for module, path in known.items():
        here = layer_of(module)
        for lineno, name in every_import(module, path, known, lazy):
            target = _resolve(name, known) if name.startswith(PACKAGE) else None
            if target is None or (module, target) in PUBLIC_ALIASES:
                continue
            if layer_of(target) < here:
                where = path.relative_to(root.parent)
                found.append(
                    f"{where}:{lineno} {module} ({LAYERS[here][0]}) imports {target} "
                    f"({LAYERS[layer_of(target)][0]})"
                )
    return sorted(set(found))


def test_every_module_is_in_a_layer() -> None:
    for module in _modules():
        layer_of(module)
    with pytest.raises(AssertionError, match="in no layer"):
        layer_of("lakewarden.newpackage.module")


def test_the_layer_walk_sees_function_level_and_lazy_imports(tmp_path: Path) -> None:
    known = _modules()
    lazy = {module: _lazy_exports(path) for module, path in known.items()}
    assert lazy["lakewarden.table"]["Table"] == "lakewarden.api.table"
    probe = tmp_path / "config.py"
    probe.write_text(
        "from lakewarden.table import TableConfig\n"
        "def later() -> None:\n    from lakewarden.table import Table\n"
    )
    names = [n for _, n in every_import("lakewarden.table.config", probe, known, lazy)]
    assert names == ["lakewarden.table.config", "lakewarden.api.table"]
    assert layer_of("lakewarden.api.table") < layer_of("lakewarden.tableservice.executor")
    assert layer_of("lakewarden.table.config") > layer_of("lakewarden.handle")


def test_no_import_runs_up_the_layers() -> None:
    """Each package builds on those below it and never reaches back up, not even inside a
    function: the user-facing ``Table`` (``lakewarden.api``) drives the table services, the
    error table and publishing, which build on the table core."""
    assert upward_imports() == []
