"""`mlx-manager pull REPO`: a hub download through the running server's download manager (the
dashboard's: resumable, hash-checked, probed on arrival), with a progress bar.

Ctrl-C cancels the download; its partial files stay, and pulling the repo again resumes them.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from mlx_manager.cli_client import KeyOption, ServerClient
from mlx_manager.cli_support import CliError, console, home_session, parser_name
from mlx_manager.records import DownloadStatus
from mlx_manager.services.model_details import model_details
from mlx_manager.services.pulls import PullState

# A stream the server ends at its request time limit is opened again (at most this many times
# in a row without news).
MAX_QUIET_RECONNECTS = 3


def pull(
    repo_id: Annotated[
        str, typer.Argument(help="A Hugging Face repository, e.g. mlx-community/Qwen3-4B-4bit.")
    ],
    revision: Annotated[str, typer.Option(help="Branch, tag or commit.")] = "main",
    key: KeyOption = None,
) -> None:
    """Download a model from the hub into the running server (resumes a stopped download)."""
    with ServerClient.connect(key) as client:
        if client.find(f"/v1/models/{repo_id}") is not None:
            console.print(f"{repo_id} is already here (`mlx-manager show {repo_id}`)")
            return
        started = client.call("POST", "/v1/admin/downloads", json={"repo_id": repo_id, "revision": revision})
        state = PullState.model_validate(started)
        try:
            state = _follow(client, state)
        except KeyboardInterrupt:
            client.call("POST", f"/v1/admin/downloads/{state.download.id}/cancel")
            raise CliError(
                f"stopped; the files received so far stay: `mlx-manager pull {repo_id}` resumes"
            ) from None
    _report(state)


def _follow(client: ServerClient, state: PullState) -> PullState:
    """Show the pull's progress until it is finished; its last state."""
    job_id, repo_id = state.download.id, state.download.repo_id
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(binary_units=True),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    quiet = 0
    with Progress(*columns, console=console) as progress:
        task = progress.add_task(f"pulling {repo_id}", total=state.download.bytes_total)
        while not state.finished:
            seen = state
            with client.events("GET", f"/v1/admin/downloads/{job_id}/events") as events:
                for data in events:
                    if isinstance(data.get("error"), dict):  # the stream's time limit: open it again
                        break
                    state = PullState.model_validate(data)
                    _show(progress, task, state)
            quiet = 0 if state != seen else quiet + 1
            if quiet > MAX_QUIET_RECONNECTS:
                raise CliError(f"the server stopped reporting on download {job_id}; see the models page")
    return state


def _show(progress: Progress, task: TaskID, state: PullState) -> None:
    job = state.download
    if state.probe is not None:
        step = f": {state.probe.step}" if state.probe.step else ""
        progress.update(task, description=f"probing {job.model_id}{step}")
    elif job.status == DownloadStatus.QUEUED:
        progress.update(task, description=f"{job.repo_id}: waiting for a free download slot")
    else:
        progress.update(task, description=f"pulling {job.repo_id}")
    progress.update(task, total=job.bytes_total, completed=job.bytes_done)


def _report(state: PullState) -> None:
    job = state.download
    if job.status != DownloadStatus.COMPLETED or job.model_id is None:
        raise CliError(f"download {job.status}: {job.error or 'see the models page'}")
    model_id = job.model_id
    console.print(f"pulled {job.repo_id} as model {model_id}")
    probe = state.probe.status if state.probe else "not started"
    if probe == "done":
        with home_session() as session:
            details = model_details(session, model_id)
        if details is not None:
            console.print(
                f"probed: {details.model_type}; tool calls: {parser_name(details.tool_parser)}; "
                f"reasoning: {parser_name(details.thinking_parser)}"
            )
    elif probe == "failed" and state.probe is not None:
        console.print(f"the probe failed ({state.probe.error}); `mlx-manager probe {model_id}` tries again")
    elif probe == "off":
        console.print(f"not probed (auto-probe is off in Settings); `mlx-manager probe {model_id}` probes it")
    else:
        console.print(f"not probed yet; `mlx-manager probe {model_id}` probes it")
