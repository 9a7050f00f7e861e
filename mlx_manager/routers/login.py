"""Login, logout, and the admin password set on first visit from this machine.

POST /login checks the password (argon2) under a per-address throttle and sets the session
cookie (signed, HttpOnly, SameSite=Lax, with an expiry; Secure over https). With no password
yet, /login offers to set one, to a browser on this machine only; from elsewhere it says to run
`mlx-manager admin set-password`. Every form carries the CSRF token like the other pages'.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from mlx_manager.deps import Page, PageDep
from mlx_manager.services.admin_account import (
    MIN_PASSWORD_CHARS,
    SESSION_COOKIE,
    PasswordRefused,
    check_password,
    end_sessions,
    failed_logins,
    login_wait_s,
    new_session_cookie,
    password_is_set,
    session_is_valid,
    set_password,
)
from mlx_manager.web.templating import render
from mlx_server.facade import is_loopback

router = APIRouter()


def _next_page(target: str) -> str:
    """Only a path on this site (never `//host` or a scheme): no open redirect."""
    return target if target.startswith("/") and not target.startswith(("//", "/\\")) else "/"


def _client(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def _page(page: Page, *, next_page: str, error: str | None = None, status: int = 200) -> HTMLResponse:
    response = render(
        page.request,
        "login.html",
        needs_setup=not password_is_set(page.session),
        can_setup=is_loopback(_client(page.request)),
        next_page=_next_page(next_page),
        min_chars=MIN_PASSWORD_CHARS,
        error=error,
    )
    response.status_code = status
    return response


def _logged_in(page: Page, next_page: str) -> Response:
    lifetime_s = page.settings.session_hours * 3600
    response = RedirectResponse(_next_page(next_page), status_code=303)
    response.set_cookie(
        SESSION_COOKIE,
        new_session_cookie(page.session, lifetime_s),
        max_age=int(lifetime_s),
        httponly=True,
        samesite="lax",
        secure=page.request.url.scheme == "https",
    )
    return response


NextPage = Annotated[str, Form(alias="next")]


@router.get("/login", response_class=HTMLResponse)
def login_page(page: PageDep, next_page: Annotated[str, Query(alias="next")] = "/") -> HTMLResponse:
    return _page(page, next_page=next_page)


@router.post("/login", response_class=HTMLResponse)
def login(page: PageDep, password: Annotated[str, Form()], next_page: NextPage = "/") -> Response:
    client = _client(page.request)
    wait = login_wait_s(client)
    if wait is not None:
        error = f"Too many wrong passwords: try again in {wait} s."
        response = _page(page, next_page=next_page, status=429, error=error)
        response.headers["Retry-After"] = str(wait)
        return response
    if not check_password(page.session, password):
        failed_logins.add(client)
        return _page(page, next_page=next_page, status=401, error="Wrong password.")
    failed_logins.forget(client)
    return _logged_in(page, next_page)


@router.post("/login/setup", response_class=HTMLResponse)
def first_password(
    page: PageDep,
    password: Annotated[str, Form()],
    confirm: Annotated[str, Form()],
    next_page: NextPage = "/",
) -> Response:
    """The first password, from this machine only; afterwards `mlx-manager admin set-password`."""
    if password_is_set(page.session) or not is_loopback(_client(page.request)):
        error = (
            "The password is set from this machine's browser on first visit, "
            "or with `mlx-manager admin set-password`."
        )
        return _page(page, next_page=next_page, status=403, error=error)
    if password != confirm:
        return _page(page, next_page=next_page, status=400, error="The two passwords differ.")
    try:
        set_password(page.session, password)
    except PasswordRefused as exc:
        return _page(page, next_page=next_page, status=400, error=str(exc))
    return _logged_in(page, next_page)


@router.post("/logout")
def logout(page: PageDep) -> Response:
    """Ends the sessions on the server (a copy of the cookie kept elsewhere opens nothing more),
    when sent with a valid one: without it, nobody else's session can be ended from here."""
    if session_is_valid(page.session, page.request.cookies.get(SESSION_COOKIE)):
        end_sessions(page.session)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, httponly=True, samesite="lax")
    return response
