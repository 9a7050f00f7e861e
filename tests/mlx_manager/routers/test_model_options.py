"""The model page's generation options: the draft picker lists local text models, a save stores
and reports them, a bad value is refused with what to fix, and a loaded model shows what it runs
with (a tiny random draft with SmolLM2's vocabulary beside the real SmolLM2), and a playground
reply's stats line shows the draft's share of its tokens."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient
from sqlmodel import Session, select

from mlx_manager.records import ConversationMessage
from mlx_server.database import get_engine
from mlx_server.records import ModelRecord, ModelSource

HTMX = {"HX-Request": "true"}


def test_the_model_page_sets_a_draft_and_kv_bits_and_shows_them_loaded(
    page: TestClient, tiny_draft_dirs: dict[str, Path]
) -> None:
    with Session(get_engine()) as session:
        session.add(ModelRecord(id="tiny-draft", source=ModelSource.LOCAL, path=str(tiny_draft_dirs["tiny"])))
        session.commit()
    html = page.get("/models/smol").text
    assert 'data-testid="model-options"' in html and '<option value="tiny-draft"' in html
    assert '<option value="smol"' not in html  # a model cannot draft for itself

    refused = page.post("/models/smol/options", data={"kv_bits": "3"}, headers=HTMX)
    assert refused.status_code == 400 and "kv_bits must be 4, 8 or null" in refused.text

    saved = page.post(
        "/models/smol/options",
        data={"draft_model": "tiny-draft", "kv_bits": "8", "kv_group_size": "64"},
        headers=HTMX,
    )
    assert saved.status_code == 200
    assert "Saved: drafts with tiny-draft, 8-bit KV cache." in saved.text
    assert (
        '<option value="tiny-draft" selected>' in saved.text and '<option value="8" selected>' in saved.text
    )

    page.post("/models/smol/load", headers=HTMX).raise_for_status()
    shown = page.get("/models/smol").text
    assert "Loaded with\n    draft tiny-draft,\n    8-bit KV cache" in shown

    # The playground's stats line shows the draft's share of the reply's tokens.
    turn = {"model_id": "smol", "temperature": "0", "max_tokens": "4", "content": "Hi"}
    sent = page.post("/chat/send", data=turn, follow_redirects=False)
    conversation = sent.headers["location"].rsplit("/", 1)[1]
    with page.stream("GET", f"/chat/{conversation}/events") as events:
        lines = list(events.iter_lines())  # up to the "done" event, when the turn's stream ends
    assert "event: done" in lines
    with Session(get_engine()) as session:
        reply = session.exec(select(ConversationMessage).where(ConversationMessage.role == "assistant")).one()
    assert reply.stats is not None and 0 <= reply.stats["draft_acceptance_rate"] <= 1
    assert (
        f"{reply.stats['draft_acceptance_rate'] * 100:.0f} % drafted"
        in page.get(sent.headers["location"]).text
    )

    plain = page.post("/models/smol/options", data={"draft_model": "", "kv_bits": ""}, follow_redirects=False)
    assert plain.status_code == 303 and plain.headers["location"] == "/models/smol"
    assert "Loaded with\n    no draft,\n    full-precision KV cache" in page.get("/models/smol").text
