"""Jinja2 setup and the one render helper: full page, or its partial for htmx."""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates
from jinja2 import Environment, PackageLoader

from mlx_manager.services.markdown import render_markdown
from mlx_manager.web.csrf import csrf_token
from mlx_server.facade import __version__, bounded, clip, pool_summary

# Templates and static files are package data (mlx_manager/templates, mlx_manager/static), found
# through the package as imported: the same in a checkout and in an installed wheel.
PACKAGE = "mlx_manager"
STATIC_PACKAGE_DIR = (PACKAGE, "static")

templates = Jinja2Templates(env=Environment(loader=PackageLoader(PACKAGE, "templates"), autoescape=True))
templates.env.globals["version"] = __version__
templates.env.globals["csrf_token"] = csrf_token
templates.env.globals["pool_summary"] = pool_summary
templates.env.globals["render_markdown"] = render_markdown


def pretty_json(text: str) -> str:
    """Tool-call arguments indented for reading; text that is not JSON as it is."""
    try:
        return json.dumps(json.loads(text), ensure_ascii=False, indent=2)
    except ValueError:
        return text


templates.env.filters["pretty_json"] = pretty_json


def filesize(num: float) -> str:
    """Binary units, as `mlx-manager models list` prints them."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(num) < 1024 or unit == "GiB":
            return f"{num:.0f} {unit}" if unit == "B" else f"{num:.1f} {unit}"
        num /= 1024
    raise AssertionError("unreachable")


templates.env.filters["filesize"] = filesize
# Values clients chose (model names, errors, parameters), cut with a marker: no single value can
# make a page large (mlx_server/utils/bounded.py).
templates.env.filters["clip"] = lambda text, limit: clip(str(text), limit)
templates.env.filters["bounded"] = bounded


def wants_fragment(request: Request) -> bool:
    """An htmx request that swaps part of the page (HX-Request), not boosted navigation or a
    history restore, which replace the whole page."""
    headers = request.headers
    return (
        headers.get("HX-Request") == "true"
        and headers.get("HX-Boosted") != "true"
        and headers.get("HX-History-Restore-Request") != "true"
    )


def render(
    request: Request, page: str, partial: str | None = None, *, status_code: int = 200, **context: Any
) -> HTMLResponse:
    """Render `page`, or only `partial` when htmx asks for a fragment (see `wants_fragment`)."""
    name = partial if partial and wants_fragment(request) else page
    response = templates.TemplateResponse(request, name, context, status_code=status_code)
    response.headers["Vary"] = "HX-Request"  # one URL, two bodies: caches must keep them apart
    return response
