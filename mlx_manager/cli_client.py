"""The CLI verbs that work on the running server over HTTP: `ps`, `load`, `unload`, `pull`, and the
connection `run` and `rm` use too.

The server is the one serving this home (MLX_MANAGER_HOME): `serve` writes its pid and URL into
<home>/serve.lock. When that server requires an API key (a key exists, or it listens off
loopback), the CLI sends the one given with `--key`, else MLX_MANAGER_API_KEY (from the
environment or a `.env` file in the working directory). `ps`, `load`, `unload`, `pull` and `rm`
call /v1/admin routes, which need a key with the admin scope; `run` needs any valid key.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Self
from urllib.parse import quote

import httpx
import typer
from pydantic_settings import BaseSettings, SettingsConfigDict
from rich.table import Table

from mlx_manager.cli_support import CliError, console, unknown_model
from mlx_manager.config import get_manager_settings
from mlx_manager.web.templating import filesize
from mlx_server.facade import serving_process

CONNECT_TIMEOUT_S = 5.0
KEY_HINT = (
    "pass it with --key KEY or set MLX_MANAGER_API_KEY (`mlx-manager keys create NAME --scope admin` "
    "makes one)"
)

KeyOption = Annotated[
    str | None,
    typer.Option(
        "--key",
        help="API key for a server that requires one (default: MLX_MANAGER_API_KEY).",
        show_default=False,
    ),
]


class ClientSettings(BaseSettings):
    """What the CLI reads to reach the server: MLX_MANAGER_API_KEY, from the environment or .env."""

    model_config = SettingsConfigDict(env_prefix="MLX_MANAGER_", env_file=".env", extra="ignore")

    api_key: str | None = None


@dataclass
class ServerClient:
    """HTTP to the server that serves this home; every failure a CliError that says what to do."""

    url: str
    pid: int
    http: httpx.Client

    @classmethod
    def connect(cls, key: str | None = None) -> Self:
        """The server of this home, or CliError saying that none runs."""
        home = get_manager_settings().server_settings().home_dir
        process = serving_process(home)
        if process is None:
            raise CliError(
                f"no server is running on the home {home}: start one with `mlx-manager serve` "
                "(or point MLX_MANAGER_HOME at the home of the one that runs)"
            )
        key = key or ClientSettings().api_key
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        # No read timeout: a load or a long reply takes as long as it takes.
        timeout = httpx.Timeout(None, connect=CONNECT_TIMEOUT_S)
        http = httpx.Client(base_url=process.client_url, headers=headers, timeout=timeout, trust_env=False)
        return cls(url=process.client_url, pid=process.pid, http=http)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.http.close()

    def call(self, method: str, path: str, *, about: str | None = None, **kwargs: Any) -> Any:
        """The JSON answer of a request, or CliError with the server's message (`about`: the
        model id the request names, for the known ids when there is no such model)."""
        response = self._send(method, path, **kwargs)
        if response.is_error:
            raise self.refusal(response, about)
        return response.json()

    def find(self, path: str) -> Any | None:
        """The JSON at `path`, or None when the server answers 404."""
        response = self._send("GET", path)
        if response.status_code == 404:
            return None
        if response.is_error:
            raise self.refusal(response)
        return response.json()

    @contextmanager
    def events(
        self, method: str, path: str, *, about: str | None = None, **kwargs: Any
    ) -> Iterator[Iterator[dict[str, Any]]]:
        """A server-sent event stream's JSON data, up to `[DONE]` or the end of the stream."""
        try:
            with self.http.stream(method, path, **kwargs) as response:
                if response.is_error:
                    response.read()
                    raise self.refusal(response, about)
                yield _event_data(response)
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from exc

    def model_ids(self) -> list[str]:
        """The ids /v1/models lists (local and remote models)."""
        return [model["id"] for model in self.call("GET", "/v1/models")["data"]]

    def model_path(self, model_id: str) -> str:
        return f"/v1/admin/models/{quote(model_id, safe='/')}"

    def refusal(self, response: httpx.Response, model_id: str | None = None) -> CliError:
        """The server's error message as a CliError (a missing model named with the known ids)."""
        error = _error_of(response)
        if response.status_code == 401:
            return CliError(
                f"the server at {self.url} needs an API key: {error.get('message', '')} {KEY_HINT}"
            )
        if model_id is not None and error.get("code") == "model_not_found":
            return unknown_model(model_id, self.model_ids())
        return CliError(str(error.get("message") or f"HTTP {response.status_code} from {self.url}"))

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return self.http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from exc

    def _unreachable(self, exc: Exception) -> CliError:
        return CliError(f"the server at {self.url} (pid {self.pid}) does not answer: {exc}")


def _error_of(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {"message": response.text[:500]}
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return error
    return {"message": str(body.get("detail") if isinstance(body, dict) else body)}


def _event_data(response: httpx.Response) -> Iterator[dict[str, Any]]:
    for line in response.iter_lines():
        if not line.startswith("data:"):
            continue
        data = line.removeprefix("data:").strip()
        if data == "[DONE]":
            return
        yield json.loads(data)


def ps(key: KeyOption = None) -> None:
    """Loaded models: type, memory, requests in flight, pinned; and the pool's figures."""
    with ServerClient.connect(key) as client:
        pool = client.call("GET", "/v1/admin/pool")
    table = Table("MODEL", "TYPE", "SIZE", "REQUESTS", "PINNED", "LAST USED", box=None, header_style="bold")
    now = datetime.now(UTC)
    for model in pool["models"]:
        idle = now - datetime.fromisoformat(model["last_used"])
        table.add_row(
            model["id"],
            model["type"],
            filesize(model["size_bytes"]),
            str(model["active_requests"]),
            "yes" if model["pinned"] else "",
            f"{idle.total_seconds():.0f} s ago",
        )
    if pool["models"]:
        console.print(table)
    else:
        console.print("no model is loaded")
    loading = f"; loading {', '.join(pool['loading'])}" if pool["loading"] else ""
    console.print(
        f"memory: {filesize(pool['used_bytes'])} of a {filesize(pool['budget_bytes'])} budget in use "
        f"(process {filesize(pool['process_rss_bytes'])}); requests: {pool['pending_requests']} "
        f"running or waiting of {pool['max_pending_requests']}{loading}"
    )


def load(
    model_id: Annotated[str, typer.Argument(help="A model id (`mlx-manager ls`).")],
    pin: Annotated[
        bool, typer.Option("--pin", help="Keep it loaded: never evicted or idle-unloaded.")
    ] = False,
    key: KeyOption = None,
) -> None:
    """Load a model into the running server now (its first request then starts at once)."""
    with ServerClient.connect(key) as client, console.status(f"loading {model_id}"):
        entry = client.call(
            "POST", f"{client.model_path(model_id)}/load", params={"pin": pin}, about=model_id
        )
    pinned = ", pinned" if entry["pinned"] else ""
    console.print(f"loaded {entry['id']} ({entry['type']}, {filesize(entry['size_bytes'])}{pinned})")


def unload(
    model_id: Annotated[str, typer.Argument(help="A loaded model's id (`mlx-manager ps`).")],
    key: KeyOption = None,
) -> None:
    """Unload a model from the running server and free its memory."""
    with ServerClient.connect(key) as client:
        client.call("POST", f"{client.model_path(model_id)}/unload", about=model_id)
    console.print(f"unloaded {model_id}")
