"""A model's defaults from its page and `mlx-manager models set`; a new playground chat with the
model starts from them."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlmodel import Session
from typer.testing import CliRunner

from mlx_manager.cli import app
from mlx_manager.services.conversations import fresh_conversation
from mlx_server.database import get_engine

HTMX = {"HX-Request": "true"}
runner = CliRunner()


def test_the_model_page_sets_its_defaults_and_new_chats_start_from_them(page: TestClient) -> None:
    assert 'data-testid="model-defaults"' in page.get("/models/smol").text
    form = {
        "temperature": "0.3",
        "max_tokens": "100",
        "thinking": "off",
        "system_prompt": "Be brief.",
        "beam_size": "5",  # read by transcriptions only (a speech-to-text model's)
    }
    saved = page.post("/models/smol/defaults", data=form, headers=HTMX)
    assert saved.status_code == 200 and saved.text.startswith("\n<section") and "Saved" in saved.text
    assert 'value="0.3"' in saved.text and ">Be brief.</textarea>" in saved.text
    stored = page.get("/v1/admin/models/smol/defaults").json()
    assert (stored["temperature"], stored["max_tokens"], stored["thinking"]) == (0.3, 100, False)
    assert stored["beam_size"] == 5 and 'name="beam_size" inputmode="numeric" value="5"' in saved.text
    refused = page.post("/models/smol/defaults", data={**form, "top_p": "0"}, headers=HTMX)
    assert refused.status_code == 400 and "top_p: Input should be greater than 0" in refused.text
    assert 'value="0"' in refused.text  # what was typed stays to be fixed
    assert page.get("/v1/admin/models/smol/defaults").json()["top_p"] is None  # nothing saved
    plain = page.post("/models/smol/defaults", data=form, follow_redirects=False)
    assert plain.status_code == 303 and plain.headers["location"] == "/models/smol"
    with Session(get_engine()) as session:
        chat = fresh_conversation(session, ["smol"])
    assert chat.parameters["temperature"] == 0.3 and chat.parameters["max_tokens"] == 100
    assert chat.parameters["enable_thinking"] is False


def test_models_set_changes_prints_and_refuses_with_what_to_fix(page: TestClient) -> None:
    result = runner.invoke(app, ["models", "set", "smol", "temperature=0.2", "system_prompt=Be brief."])
    assert result.exit_code == 0, result.output
    assert "temperature         0.2" in result.output and "'Be brief.'" in result.output
    shown = runner.invoke(app, ["models", "set", "smol"])
    assert shown.exit_code == 0 and "temperature         0.2" in shown.output
    cleared = runner.invoke(app, ["models", "set", "smol", "temperature="])
    assert "temperature" not in cleared.output and "system_prompt" in cleared.output
    unknown = runner.invoke(app, ["models", "set", "nope", "temperature=0"])
    assert unknown.exit_code == 1 and "no model 'nope'; the models are: smol" in unknown.output
    bad = runner.invoke(app, ["models", "set", "smol", "context_length=100000"])
    assert bad.exit_code == 1 and "trained for (8192 tokens)" in bad.output
