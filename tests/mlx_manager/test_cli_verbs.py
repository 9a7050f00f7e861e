"""The verbs Ollama and LM Studio users type, against a real `mlx-manager serve` (SmolLM2): run as a
conversation in a pseudo-terminal (reasoning dimmed) and once, tool calls as lines, ps / load /
unload / show / rm, wrong ids, pull from the local hub (progress bar, Ctrl-C, resume, probe), and
an API key once the server needs one.

One test drives them all, in a user's order, so the suite starts one server for them (the steps
are the helpers below).
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import time
from pathlib import Path

import pexpect
import pytest
from sqlmodel import Session, col, select
from typer.testing import CliRunner, Result

from mlx_manager.cli import app
from mlx_manager.cli_client import ServerClient
from mlx_manager.cli_run import TerminalChat, converse
from mlx_manager.records import DownloadJob
from mlx_server.database import get_engine, upgrade_database
from mlx_server.records import ApiKeyScope, AuditLog, ModelCapabilities, ModelRecord, ModelSource
from mlx_server.services.operations.api_keys import create_api_key
from tests.conftest import SMOLLM_REPO
from tests.hub_server import HubServer
from tests.support import MLX_MANAGER, ServerProcess

SMOL = "SmolLM2-135M-Instruct"
THINKING_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}"
)
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
DIM = "\x1b[2m"


def cli(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def spawn(*args: str) -> pexpect.spawn:
    """The installed command in a pseudo-terminal, as a user's shell runs it (colours on)."""
    # The terminal's size is the pty's: a COLUMNS inherited from the caller (pytest-xdist's
    # workers get one) would make rich fold the bar's "MiB" onto the next line.
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "200", "LINES": "40"}
    env.pop("NO_COLOR", None)
    return pexpect.spawn(
        str(MLX_MANAGER), list(args), env=env, encoding="utf-8", timeout=120, dimensions=(40, 200)
    )


def _register(home: Path, smollm_dir: Path, tmp_path: Path) -> None:
    """SmolLM2 in place (its files are the session's: `rm` must leave them), and a copy whose
    template opens a reasoning block, as Qwen3-style thinking templates do."""
    thinking_dir = tmp_path / "smol-think"
    shutil.copytree(smollm_dir, thinking_dir, copy_function=os.symlink)
    config_path = thinking_dir / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = THINKING_TEMPLATE
    config_path.unlink()
    config_path.write_text(json.dumps(config))
    upgrade_database()
    with Session(get_engine()) as session:
        session.add(ModelRecord(id=SMOL, source=ModelSource.LOCAL, path=str(smollm_dir), size_bytes=1))
        session.add(ModelRecord(id="smol-think", source=ModelSource.LOCAL, path=str(thinking_dir)))
        for model_id, thinking in ((SMOL, "null"), ("smol-think", "think_tag")):
            session.add(
                ModelCapabilities(
                    model_id=model_id,
                    model_type="text-gen",
                    model_family="default",
                    tool_parser_id="hermes_json",
                    thinking_parser_id=thinking,
                    supports_native_tools=False,
                )
            )
        session.commit()


def test_the_verbs_against_a_running_server(
    home: Path,
    smollm_dir: Path,
    hub: HubServer,
    hub_cache: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _register(home, smollm_dir, tmp_path)
    server = ServerProcess(home, tmp_path / "serve.log", env={"MLX_MANAGER_IMPORT_DEFAULT_MODEL": "false"})
    server.start()
    try:
        _conversation_in_a_terminal()
        _ctrl_d_ends_the_conversation(monkeypatch)
        _one_prompt_answers_once(tmp_path)
        _load_ps_unload()
        _show_and_rm(smollm_dir)
        _wrong_ids_name_the_known_ones()
        _pull_from_the_hub(hub)
        _a_key_when_the_server_needs_one(monkeypatch)
    finally:
        server.stop()


def _conversation_in_a_terminal() -> None:
    """Two turns with a thinking model in a pseudo-terminal: each reply streamed with its
    reasoning dimmed, the second sent with the first (the conversation is kept), then /bye."""
    chat = spawn("run", "smol-think", "--max-tokens", "12", "--temperature", "0")
    chat.expect_exact(">>> ")
    chat.sendline("What is the capital of France?")
    chat.expect_exact(">>> ")
    first = chat.before
    chat.sendline("And of Germany?")
    chat.expect_exact(">>> ")
    second = chat.before
    chat.sendline("/bye")
    chat.expect(pexpect.EOF)
    chat.close()
    assert chat.exitstatus == 0
    for reply in (first, second):
        assert DIM in reply, repr(reply)
        assert ANSI.sub("", reply.split(DIM, 1)[1]).strip(), repr(reply)
    assert "Paris" in ANSI.sub("", first), first
    rows = _audit_rows("smol-think", 2)
    # The second request carried the first question and reply before the new one.
    assert rows[1].prompt_tokens > rows[0].prompt_tokens + (rows[0].completion_tokens or 0)


def _ctrl_d_ends_the_conversation(monkeypatch: pytest.MonkeyPatch) -> None:
    """End of input at the prompt (Ctrl-D in a terminal) ends it without a request."""
    with monkeypatch.context() as patched, ServerClient.connect() as client:
        patched.setattr("sys.stdin", io.StringIO(""))
        converse(TerminalChat(client, SMOL, {}))


def _audit_rows(model_id: str, count: int) -> list[AuditLog]:
    deadline = time.monotonic() + 15
    while True:
        with Session(get_engine()) as session:
            query = select(AuditLog).where(AuditLog.model == model_id).order_by(col(AuditLog.id))
            rows = list(session.exec(query))
        if len(rows) >= count or time.monotonic() > deadline:
            assert len(rows) >= count, f"{len(rows)} audit rows for {model_id}"
            return rows
        time.sleep(0.2)


def _one_prompt_answers_once(tmp_path: Path) -> None:
    answered = cli("run", SMOL, "What is the capital of France?", "--max-tokens", "12", "--temperature", "0")
    assert answered.exit_code == 0, answered.output
    assert "Paris" in answered.output
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([WEATHER_TOOL]))
    called = cli(
        "run", SMOL, "What is the weather in Paris?", "--tools", str(tools), "--tool-choice", "required",
        "--max-tokens", "48", "--temperature", "0",
    )  # fmt: skip
    assert called.exit_code == 0, called.output
    assert re.search(r"^→ get_weather\(\{.*\}\)$", called.output, re.MULTILINE), called.output


def _load_ps_unload() -> None:
    loaded = cli("load", SMOL, "--pin")
    assert loaded.exit_code == 0, loaded.output
    assert f"loaded {SMOL}" in loaded.output and "pinned" in loaded.output
    ps = cli("ps")
    assert ps.exit_code == 0, ps.output
    row = next(line for line in ps.output.splitlines() if line.strip().startswith(SMOL))
    assert "text-gen" in row and "yes" in row and "MiB" in row
    assert "memory:" in ps.output and "requests:" in ps.output
    refused = cli("rm", SMOL)
    assert refused.exit_code == 1 and "unload it" in refused.output
    for model_id in (SMOL, "smol-think"):
        unloaded = cli("unload", model_id)
        assert unloaded.exit_code == 0, unloaded.output
    after = cli("ps")
    assert "no model is loaded" in after.output, after.output


def _show_and_rm(smollm_dir: Path) -> None:
    shown = cli("show", SMOL)
    assert shown.exit_code == 0, shown.output
    assert str(smollm_dir) in re.sub(r"\s+", "", shown.output)  # a long path folds over lines
    assert "text-gen" in shown.output and "hermes_json" in shown.output and "<|im_start|>" in shown.output
    template = cli("show", SMOL, "--template")
    assert template.output.lstrip().startswith("{%"), template.output
    removed = cli("rm", SMOL)
    assert removed.exit_code == 0, removed.output
    assert "files stay" in removed.output
    assert smollm_dir.is_dir()
    assert SMOL not in cli("ls").output


def _wrong_ids_name_the_known_ones() -> None:
    for verb in ("run", "show", "load", "unload", "rm"):
        result = cli(verb, "no-such-model")
        assert result.exit_code == 1, (verb, result.output)
        assert "no-such-model" in result.output and "known models:" in result.output, (verb, result.output)
        assert "smol-think" in result.output, (verb, result.output)
    missing = cli("pull", "mlx-community/no-such-repo")
    assert missing.exit_code == 1 and "mlx-community/no-such-repo" in missing.output, missing.output


def _pull_from_the_hub(hub: HubServer) -> None:
    """The progress bar in a terminal; Ctrl-C stops the download and pulling again resumes it;
    the probe on arrival; then the model answers."""
    # ~55 s for the weights: time to see the bar and stop it, also when a loaded machine delays
    # the progress events (two full suites here saw the whole pull before the Ctrl-C reached it
    # at ~14 s); the Ctrl-C ends the throttled pull early, so the test does not wait for it.
    hub.throttle_bps = 2 * 2**20
    stopped = spawn("pull", SMOLLM_REPO)
    seen = io.StringIO()
    stopped.logfile_read = seen
    try:
        stopped.expect(r"[1-9][\d.]*/[\d.]+ MiB")  # the bar's bytes so far of the total
    except pexpect.EOF:
        shown = ANSI.sub("", seen.getvalue())
        raise AssertionError(f"the pull ended before its bar showed bytes:\n{shown}") from None
    stopped.sendintr()
    stopped.expect_exact(f"`mlx-manager pull {SMOLLM_REPO}` resumes")
    stopped.expect(pexpect.EOF)
    stopped.close()
    assert stopped.exitstatus == 1
    hub.throttle_bps = None
    pull = spawn("pull", SMOLLM_REPO)
    pull.expect(r"[\d.]+/[\d.]+ MiB")
    pull.expect(f"pulled {SMOLLM_REPO} as model {SMOLLM_REPO}")
    pull.expect(pexpect.EOF)
    pull.close()
    shown = ANSI.sub("", pull.before)
    assert pull.exitstatus == 0, shown
    assert "probed: text-gen" in shown, shown
    with Session(get_engine()) as session:
        jobs = session.exec(select(DownloadJob)).all()
    assert [(job.status, job.model_id) for job in jobs] == [("completed", SMOLLM_REPO)]  # one job, resumed
    answered = cli(
        "run", SMOLLM_REPO, "What is the capital of France?", "--max-tokens", "4", "--temperature", "0"
    )
    assert answered.exit_code == 0 and answered.output.strip(), answered.output
    assert cli("pull", SMOLLM_REPO).output.startswith(f"{SMOLLM_REPO} is already here")


def _a_key_when_the_server_needs_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once a key exists the server needs one: the CLI says how to give it, then uses it."""
    with Session(get_engine()) as session:
        key = create_api_key(session, name="cli", scope=ApiKeyScope.ADMIN).secret
    refused = cli("ps")
    assert refused.exit_code == 1 and "needs an API key" in refused.output and "--key" in refused.output
    assert cli("ps", "--key", key).exit_code == 0
    with monkeypatch.context() as patched:
        patched.setenv("MLX_MANAGER_API_KEY", key)
        assert cli("ps").exit_code == 0
