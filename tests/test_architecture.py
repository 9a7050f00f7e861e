"""The shape of the code, read from the source (no imports, so it takes a second):

- `mlx_manager` reaches the server only through `mlx_server.facade`;
- `mlx_server` never imports `mlx_manager`;
- a router does not import another router (shared pieces live in services), on either side;
- the manager's services never import its web layer (pages are rendered by routers and `web/`);
- no source file over 400 lines, no function over 60 lines.

The migrations (`migrations/`, package data Alembic runs by path through `mlx_server/migrations`)
are not source these rules cover: their scripts are generated, and their env.py registers the
tables of both packages because the one database holds both.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
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
