"""`mlx-manager keys create|list|revoke`, `admin set-password`, and serve's refusal off loopback."""

from __future__ import annotations

from sqlmodel import Session
from typer.testing import CliRunner

from mlx_manager.cli import app
from mlx_manager.services.admin_account import check_password
from mlx_server.database import get_engine

runner = CliRunner()


def test_keys_create_list_revoke() -> None:
    created = runner.invoke(
        app,
        [
            "keys",
            "create",
            "ci bot",
            "--scope",
            "admin",
            "--requests-per-minute",
            "30",
            "--expires-in-days",
            "7",
        ],
    )
    assert created.exit_code == 0, created.output
    secret = created.output.strip().splitlines()[-1]
    assert secret.startswith("mlx-") and "shown only once" in created.output
    listed = runner.invoke(app, ["keys", "list"])
    assert listed.exit_code == 0
    assert listed.output.startswith(f"ci bot\t{secret[:12]}...\tadmin\tactive\texpires ")
    assert "30/min - tokens/day" in listed.output and secret not in listed.output
    revoked = runner.invoke(app, ["keys", "revoke", "ci bot"])
    assert revoked.exit_code == 0 and "revoked 'ci bot'" in revoked.output
    assert "\trevoked\t" in runner.invoke(app, ["keys", "list"]).output


def test_keys_errors_exit_1_with_the_reason() -> None:
    runner.invoke(app, ["keys", "create", "dup"])
    again = runner.invoke(app, ["keys", "create", "dup"])
    assert again.exit_code == 1 and "exists already" in again.output
    missing = runner.invoke(app, ["keys", "revoke", "nobody"])
    assert missing.exit_code == 1 and "No key is named 'nobody'" in missing.output


def test_admin_set_password_from_stdin() -> None:
    short = runner.invoke(app, ["admin", "set-password", "--password-stdin"], input="short\n")
    assert short.exit_code == 1 and "at least 10 characters" in short.output
    done = runner.invoke(app, ["admin", "set-password", "--password-stdin"], input="a long enough secret\n")
    assert done.exit_code == 0, done.output
    with Session(get_engine()) as session:
        assert check_password(session, "a long enough secret")
        assert not check_password(session, "a long enough secreT")


def test_admin_set_password_prompts_twice() -> None:
    result = runner.invoke(app, ["admin", "set-password"], input="first password x\nfirst password x\n")
    assert result.exit_code == 0, result.output
    with Session(get_engine()) as session:
        assert check_password(session, "first password x")


def test_serve_refuses_a_network_bind_without_key_or_password() -> None:
    result = runner.invoke(app, ["serve", "--host", "0.0.0.0", "--no-default-model"])
    assert result.exit_code == 2
    assert "Refusing to listen on 0.0.0.0" in result.output
    assert "mlx-manager keys create" in result.output and "mlx-manager admin set-password" in result.output
