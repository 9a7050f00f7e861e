"""The shape of the code, read from the source (no imports, so it takes a second):

- `mlx_manager` reaches the server only through `mlx_server.facade`;
- `mlx_server` never imports `mlx_manager`;
- a router does not import another router (shared pieces live in services), on either side;
- the manager's services never import its web layer (pages are rendered by routers and `web/`);
- no source file over 400 lines, no function over 60 lines;
- no import cycle between modules (type-checking and function-local imports count too), and in
  the pipeline no module imports one from a layer above it: the types (events, request,
  engine/params) < the engine < remote backends < the orchestration (inference, chat_turn...)
  < the protocols < the API routes. So the engine never imports a protocol, inference.py or a
  remote backend, and remote/ reaches the pipeline only through its types.

The migrations (`migrations/`, package data Alembic runs by path through `mlx_server/migrations`)
are not source these rules cover: their scripts are generated, and their env.py registers the
tables of both packages because the one database holds both.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("mlx_manager", "mlx_server")
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 60


MIGRATIONS = ROOT / "mlx_server" / "migrations"


def source_files(package: str) -> list[Path]:
    return sorted(path for path in (ROOT / package).rglob("*.py") if not path.is_relative_to(MIGRATIONS))


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> Iterator[tuple[int, str]]:
    """(line, module) for every import in the file, function-local ones included; a relative
    import is resolved against the file's package."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # `from pkg import module` imports pkg.module when it is one
            yield node.lineno, base
            yield from ((node.lineno, f"{base}.{alias.name}") for alias in node.names)


def is_module(name: str) -> bool:
    path = ROOT / name.replace(".", "/")
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def test_the_manager_reaches_the_server_only_through_the_facade() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in source_files("mlx_manager")
        for line, name in imported_modules(path)
        if within(name, "mlx_server") and not within(name, "mlx_server.facade") and is_module(name)
    ]
    assert found == []


def test_the_server_never_imports_the_manager() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in source_files("mlx_server")
        for line, name in imported_modules(path)
        if within(name, "mlx_manager")
    ]
    assert found == []


def test_the_managers_services_render_no_pages() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in source_files("mlx_manager/services")
        for line, name in imported_modules(path)
        if within(name, "mlx_manager.web") or within(name, "mlx_manager.routers")
    ]
    assert found == []


@pytest.mark.parametrize("routers", ["mlx_manager.routers", "mlx_server.api.v1"])
def test_a_router_imports_no_other_router(routers: str) -> None:
    modules = {module_name(path) for path in (ROOT / routers.replace(".", "/")).glob("*.py")} - {routers}
    found = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in source_files(routers.split(".")[0])
        if module_name(path) in modules
        for line, name in imported_modules(path)
        if name in modules and name != module_name(path)
    ]
    assert found == []


@pytest.mark.parametrize("package", PACKAGES)
def test_no_source_file_is_over_400_lines(package: str) -> None:
    long = {
        str(path.relative_to(ROOT)): count
        for path in source_files(package)
        if (count := len(path.read_text().splitlines())) > MAX_FILE_LINES
    }
    assert long == {}


@pytest.mark.parametrize("package", PACKAGES)
def test_no_function_is_over_60_lines(package: str) -> None:
    long = {}
    for path in source_files(package):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                lines = (node.end_lineno or node.lineno) - first + 1
                if lines > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT)}::{node.name}"] = lines
    assert long == {}


PIPELINE = "mlx_server.services.pipeline"
PIPELINE_TYPES = (f"{PIPELINE}.events", f"{PIPELINE}.request", f"{PIPELINE}.engine.params")
# Lowest first; a module may import its own layer and those below, never one above.
LAYERS = (
    PIPELINE_TYPES,
    (f"{PIPELINE}.engine",),
    ("mlx_server.services.remote",),
    (PIPELINE,),
    (f"{PIPELINE}.protocols",),
    ("mlx_server.api",),
)


@cache
def import_graph() -> dict[str, frozenset[str]]:
    """Module -> the modules of both packages it imports (not the packages it sits in)."""
    graph = {}
    for package in PACKAGES:
        for path in source_files(package):
            name = module_name(path)
            graph[name] = frozenset(
                imported
                for _, imported in imported_modules(path)
                if imported != name and not within(name, imported) and is_module(imported)
            )
    return graph


def cycles(graph: dict[str, frozenset[str]]) -> list[list[str]]:
    """The groups of modules that import each other round a circle (Tarjan's components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = stack[stack.index(node) :]
            del stack[stack.index(node) :]
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def layer(name: str) -> int | None:
    ranks = [
        (len(prefix), rank)
        for rank, prefixes in enumerate(LAYERS)
        for prefix in prefixes
        if within(name, prefix)
    ]
    return max(ranks)[1] if ranks else None  # the most specific prefix decides


def test_no_module_is_part_of_an_import_cycle() -> None:
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_one() -> None:
    graph = {"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a"}), "d": frozenset({"a"})}
    assert cycles(graph) == [["a", "b", "c"]]


def test_no_pipeline_module_imports_one_from_a_layer_above() -> None:
    found = [
        f"{name} (layer {layer(name)}) imports {imported} (layer {layer(imported)})"
        for name, imports in import_graph().items()
        if layer(name) is not None
        for imported in imports
        if (layer(imported) or 0) > (layer(name) or 0)
    ]
    assert found == []


def test_the_engine_imports_no_protocol_no_orchestration_and_no_remote_backend() -> None:
    above = (
        f"{PIPELINE}.protocols",
        f"{PIPELINE}.inference",
        f"{PIPELINE}.chat_turn",
        "mlx_server.services.remote",
    )
    found = [
        f"{name} imports {imported}"
        for name, imports in import_graph().items()
        if within(name, f"{PIPELINE}.engine")
        for imported in imports
        if any(within(imported, prefix) for prefix in above)
    ]
    assert found == []


def test_remote_backends_reach_the_pipeline_only_through_its_types() -> None:
    found = [
        f"{name} imports {imported}"
        for name, imports in import_graph().items()
        if within(name, "mlx_server.services.remote")
        for imported in imports
        if within(imported, PIPELINE) and imported not in PIPELINE_TYPES
    ]
    assert found == []
