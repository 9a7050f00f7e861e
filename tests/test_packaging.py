"""The package as users install it: every import is a declared dependency, and the built wheel
serves from any directory.

The wheel test builds the wheel, installs it (--no-deps) into a fresh virtual environment in a
temporary directory and runs `mlx-manager serve` there on a fresh home: the default models are
imported from their packages, every dashboard page renders, a chat reply streams, and the first
start's probes fill in the models page. What it checks is the wheel's own contents (templates,
static files, migrations, entry points), not a network install: the fresh environment borrows
the dependencies from this one's site-packages through a .pth line (which, unlike a site
directory, does not run that directory's .pth files, so the editable install of this checkout
stays out). That the dependencies themselves are declared is the first test's job.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import sysconfig
import time
import tomllib
import zipfile
from importlib.metadata import packages_distributions
from pathlib import Path
from typing import Any

import httpx
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support import free_port

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("mlx_manager", "mlx_server")
DEFAULT_MODELS = ("SmolLM2-135M-Instruct", "all-MiniLM-L6-v2", "whisper-tiny.en")
# Never rendered: endless event streams, and the hub search (the real hub is out of reach here).
NOT_PAGES = {"/downloads/events", "/audit/events", "/hub/search"}
PACKAGE_DATA = (
    "mlx_manager/templates/base.html",
    "mlx_manager/templates/partials/model_row.html",
    "mlx_manager/static/htmx-2.0.11.min.js",
    "mlx_server/migrations/env.py",
    "mlx_server/migrations/script.py.mako",
    "mlx_server/migrations/versions/0001_initial_schema.py",
)
BORROWED = sysconfig.get_paths()["purelib"]  # this environment's site-packages


def _no_deps_specs() -> list[str]:
    """What `make install` (not the dev extras) adds with --no-deps (name==version)."""
    makefile = (ROOT / "Makefile").read_text()
    values = dict(re.findall(r"(?m)^([A-Z_0-9]+) := (.+)$", makefile))
    recipe = makefile[makefile.index("$(VENV)/.installed:") : makefile.index("$(VENV)/.installed-dev:")]
    named = re.findall(r"--no-deps((?: \$\([A-Z_0-9]+\))+)", recipe)
    return [spec for line in named for var in re.findall(r"[A-Z_0-9]+", line) for spec in values[var].split()]


def _declared() -> set[str]:
    """[project].dependencies and the packages the Makefile installs with --no-deps."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {canonicalize_name(Requirement(spec).name) for spec in project["dependencies"]}
    return names | {canonicalize_name(spec.split("==")[0]) for spec in _no_deps_specs()}


def test_the_install_instructions_add_what_the_makefile_installs_without_dependencies() -> None:
    readme = (ROOT / "README.md").read_text()
    install = readme[readme.index("## Install as a tool") :]
    compose = (ROOT / "docker-compose.dev.yml").read_text()
    assert len(_no_deps_specs()) == 4
    for spec in _no_deps_specs():
        assert spec in install and spec in compose, spec


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module)
    return found


def _runtime_files() -> list[Path]:
    """Every module of both packages, but the benchmarks (`make bench` installs the dev extras)
    other than those the rest imports (the report module the facade re-exports)."""
    files = [p for package in PACKAGES for p in (ROOT / package).rglob("*.py")]
    runtime = [p for p in files if "benchmark" not in p.parts]
    used = {name for p in runtime for name in _imports(p)}
    benchmarks = [p for p in files if "benchmark" in p.parts]
    return runtime + [p for p in benchmarks if ".".join(p.relative_to(ROOT).with_suffix("").parts) in used]


def test_every_runtime_import_is_a_declared_dependency() -> None:
    declared, owners = _declared(), packages_distributions()
    missing = {}
    for path in _runtime_files():
        for name in _imports(path):
            top = name.split(".")[0]
            if top in sys.stdlib_module_names or top in (*PACKAGES, "__future__"):
                continue
            distributions = {canonicalize_name(d) for d in owners.get(top, [])}
            if not distributions & declared:
                missing.setdefault(top, []).append(str(path.relative_to(ROOT)))
    assert missing == {}, "imported but not in [project].dependencies"


def _run(command: list[str], cwd: Path, env: dict[str, str], timeout: float = 180) -> str:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{command} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _install_wheel(tmp: Path) -> tuple[Path, Path]:
    """The wheel built from this checkout, installed into a fresh environment; (wheel, venv)."""
    dist, venv = tmp / "dist", tmp / "venv"
    pip = [sys.executable, "-m", "pip", "--quiet", "--disable-pip-version-check"]
    _run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(dist), str(ROOT)],
        tmp,
        dict(os.environ),
    )
    wheel = next(dist.glob("mlx_manager-*.whl"))
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp, dict(os.environ))
    python = venv / "bin" / "python"
    _run(
        [*pip, "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)],
        tmp,
        dict(os.environ),
    )
    purelib = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp, {})
    (Path(purelib.strip()) / "borrowed_dependencies.pth").write_text(f"{BORROWED}\n")
    return wheel, venv


def _environment(venv: Path, home: Path) -> dict[str, str]:
    """A user's shell in which the environment is active; nothing points at the checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "MLX_SERVER_HOME")}
    env.update(PATH=f"{venv / 'bin'}:/usr/bin:/bin", MLX_MANAGER_HOME=str(home), VIRTUAL_ENV=str(venv))
    return env


@pytest.mark.heavy
def test_the_wheel_serves_from_any_directory(tmp_path: Path) -> None:
    wheel, venv = _install_wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    for packaged in PACKAGE_DATA:
        assert packaged in names, packaged
    assert not [n for n in names if n.startswith("tests/")]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = _environment(venv, tmp_path / "home")
    _resolves_inside(venv, elsewhere, env)
    _commands_answer(venv, elsewhere, env)
    _serves(elsewhere, env, tmp_path / "serve.log")


def _resolves_inside(venv: Path, cwd: Path, env: dict[str, str]) -> None:
    """Code, templates, static files and migrations come from the environment, never the checkout."""
    script = (
        "import json, sys; from importlib.resources import files; import mlx_manager, mlx_server; "
        "print(json.dumps({'paths': [mlx_manager.__file__, mlx_server.__file__, "
        "str(files('mlx_manager') / 'templates'), str(files('mlx_manager') / 'static'), "
        "str(files('mlx_server') / 'migrations')], 'sys_path': sys.path}))"
    )
    found = json.loads(_run([str(venv / "bin" / "python"), "-c", script], cwd, env))
    assert all(Path(p).is_relative_to(venv) for p in found["paths"]), found["paths"]
    checkout = [p for p in found["sys_path"] if p and Path(p).is_relative_to(ROOT) and p != BORROWED]
    assert checkout == [], found["sys_path"]


def _commands_answer(venv: Path, cwd: Path, env: dict[str, str]) -> None:
    """Both packages run as modules and both console scripts exist (`mlx-manager serve` follows);
    each start of mlx-manager imports the whole stack, so it is started once here."""
    python = str(venv / "bin" / "python")
    listed = _run([python, "-m", "mlx_manager"], cwd, env)  # no arguments: the help, exit 0
    assert "Usage: python -m mlx_manager" in listed and " serve " in listed and " pull " in listed
    assert "serve" in _run(["mlx-server"], cwd, env)
    assert _run([python, "-m", "mlx_server", "--version"], cwd, env).startswith("mlx-server ")


def _serves(cwd: Path, env: dict[str, str], log: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        server = subprocess.Popen(
            ["mlx-manager", "serve", "--port", str(port)],
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        with httpx.Client(base_url=url, timeout=60, trust_env=False) as client:
            _wait_healthy(client, server, log)
            _every_page_renders(client)
            _a_reply_streams(client)
            _first_start_probed_the_defaults(client, log)
    finally:
        server.terminate()
        server.wait(timeout=30)


def _wait_healthy(client: httpx.Client, server: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 240  # the first start imports the three default models
    while time.monotonic() < deadline:
        assert server.poll() is None, log.read_text()
        try:
            if client.get("/health").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"serve did not answer within 240 s:\n{log.read_text()}")


def _every_page_renders(client: httpx.Client) -> None:
    paths = [p for p, ops in client.get("/openapi.json").json()["paths"].items() if "get" in ops]
    pages = [p for p in paths if "{" not in p and p not in NOT_PAGES] + [
        f"/models/{m}" for m in DEFAULT_MODELS
    ]
    assert len(pages) > 10
    for page in pages:
        response = client.get(page)
        assert response.status_code == 200, (page, response.text[:500])
    home = client.get("/").text
    for asset in re.findall(r'(?:src|href)="(/static/[^"]+)"', home):
        assert client.get(asset).status_code == 200, asset


def _a_reply_streams(client: httpx.Client) -> None:
    body = {"model": DEFAULT_MODELS[0], "messages": [{"role": "user", "content": "Say hello."}],
            "max_tokens": 8, "stream": True}  # fmt: skip
    chunks: list[dict[str, Any]] = []
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: {"):
                chunks.append(json.loads(line.removeprefix("data: ")))
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert len(chunks) > 3 and text.strip(), chunks


def _first_start_probed_the_defaults(client: httpx.Client, log: Path) -> None:
    """The models page shows each default model's parsers or profile once its probe has run."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        page = client.get("/models").text
        if page.count("probed 20") >= len(DEFAULT_MODELS):
            break
        time.sleep(1)
    else:
        raise AssertionError(f"the default models were not all probed:\n{log.read_text()[-3000:]}")
    assert "<code>hermes_json</code>" in page  # SmolLM2's tool-call parser
    assert "384 dims, mean pooling" in page  # all-MiniLM-L6-v2's profile
    assert 'class="badge cap-speech-to-text"' in page  # whisper's verified capability
