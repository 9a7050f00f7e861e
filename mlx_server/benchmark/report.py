"""A benchmark's command line and its report: the first line, printing, and the section it
writes into docs/benchmarks.md. Standard library only, so the app can import it."""

from __future__ import annotations

import argparse
import os
import platform
from datetime import UTC, datetime
from pathlib import Path


def bench_arguments(doc: str | None, write_help: str, **counts: int) -> argparse.Namespace:
    """The command line of a benchmark: `--NAME N` for each of `counts` (its default), `--write FILE`."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, default in counts.items():
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--write", type=Path, help=write_help)
    return parser.parse_args()


def run_line() -> str:
    """The first line of a report: when, on what machine, with which versions."""
    from importlib.metadata import version

    from mlx_server.utils.cpu_blas import blas_kernels

    machine = f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores"
    if blas_kernels():
        machine += f" (OpenBLAS, {blas_kernels()} kernels)"
    versions = f"mlx {version('mlx')}, mlx-lm {version('mlx-lm')}, Python {platform.python_version()}"
    return f"Run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {machine}; {versions}."


def publish(section: str, path: Path | None, title: str, start: str, end: str) -> None:
    """Print a benchmark's section, and write it into `path` (--write) when one is given."""
    print(section)
    if path is not None:
        write_section(path, title, start, end, section)


def write_section(path: Path, title: str, start: str, end: str, section: str) -> None:
    """Replace the section between the markers in `path` (appending it under `title` if new)."""
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    block = f"{start}\n{section}\n{end}"
    if start in text:
        before, rest = text.split(start, 1)
        text = before + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + f"\n\n## {title}\n\n" + block + "\n"
    path.write_text(text)
