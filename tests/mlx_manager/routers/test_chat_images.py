"""Images attached in the playground: refused for a text-only model or when not an image,
stored under the home directory, given to the tiny random-weight vision model, shown again on
the page and in both exports, and removed with the last conversation attaching them."""

from __future__ import annotations

import base64
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from PIL import Image
from sqlmodel import Session

from mlx_manager.records import ConversationMessage
from mlx_manager.services.chat_images import images_dir
from mlx_server.database import get_engine, upgrade_database
from mlx_server.records import ModelRecord, ModelSource
from tests.support import csrf_headers

HTMX = {"HX-Request": "true"}
OPTION = re.compile(r'<option value="(smol|tiny-vl)"([^>]*)>')
SEND = {"model_id": "tiny-vl", "content": "What is this?", "temperature": "0", "max_tokens": "2"}


def png(color: str) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (56, 56), color).save(buffer, "PNG")
    return buffer.getvalue()


@pytest.fixture(scope="module")
def red() -> bytes:
    return png("red")


@pytest.fixture
def chat(home: Path, tiny_vision_dir: Path, smollm_dir: Path) -> Iterator[TestClient]:
    from mlx_manager.main import create_app

    upgrade_database()
    with Session(get_engine()) as session:
        session.add(ModelRecord(id="tiny-vl", source=ModelSource.LOCAL, path=str(tiny_vision_dir)))
        session.add(ModelRecord(id="smol", source=ModelSource.LOCAL, path=str(smollm_dir)))
        session.commit()
    with TestClient(create_app()) as client:
        client.headers.update(csrf_headers(client))
        yield client


def first_message(client: TestClient, images: list[tuple[str, bytes]], **form: str) -> int:
    files = [("images", (name, data, "application/octet-stream")) for name, data in images]
    response = client.post("/chat/send", data={**SEND, **form}, files=files, follow_redirects=False)
    assert response.status_code == 303, response.text
    cid = int(response.headers["location"].rsplit("/", 1)[1])
    client.get(f"/chat/{cid}/events")  # the stream ends with the turn
    return cid


def saved(cid: int) -> list[ConversationMessage]:
    from mlx_manager.services.conversations import messages_of

    with Session(get_engine()) as session:
        return messages_of(session, cid)


def stored_files() -> list[str]:
    return sorted(p.name for p in images_dir().glob("*")) if images_dir().exists() else []


def test_attachments_refused_for_a_text_only_model_or_when_not_images(chat: TestClient, red: bytes) -> None:
    files = [("images", ("red.png", red, "image/png"))]
    response = chat.post("/chat/send", data={**SEND, "model_id": "smol"}, files=files)
    assert response.status_code == 400
    assert "The model smol reads text only, not images: pick a vision model" in response.text
    assert stored_files() == []
    # A chat on the text-only model: the attach control is disabled with the hint.
    from mlx_manager.services.conversations import create_conversation

    with Session(get_engine()) as session:
        text_chat = create_conversation(session, model_id="smol")
    page = chat.get(f"/chat/{text_chat.id}").text
    options = {value: " ".join(attributes.split()) for value, attributes in OPTION.findall(page)}
    assert options == {"smol": "selected", "tiny-vl": "data-vision"}, options
    assert 'accept="image/png,image/jpeg,image/webp,image/gif" disabled>' in page
    assert "The selected model reads text only: pick a vision model to attach images." in page

    # A file that is not an image is refused by its name, for a vision model too.
    files = [("images", ("notes.png", b"<html>not an image</html>", "image/png"))]
    response = chat.post("/chat/send", data=SEND, files=files)
    assert response.status_code == 400
    refusal = "The image notes.png was refused: The image data is not a PNG, JPEG, WebP or GIF image"
    assert refusal in response.text
    assert stored_files() == []


def test_attached_image_reaches_the_model_and_shows_on_reload_and_in_exports(
    chat: TestClient, red: bytes
) -> None:
    cid = first_message(chat, [("red.png", red)])
    user, reply = saved(cid)
    assert reply.role == "assistant" and reply.status == "done", reply
    sha = user.images[0]["sha256"] if user.images else ""
    assert user.images == [{"sha256": sha, "media_type": "image/png", "width": 56, "height": 56}]

    page = chat.get(f"/chat/{cid}").text
    assert f'<img class="thumb" src="/chat/images/{sha}"' in page
    served = chat.get(f"/chat/images/{sha}")
    assert served.status_code == 200 and served.content == red
    assert served.headers["content-type"] == "image/png"

    url = "data:image/png;base64," + base64.b64encode(red).decode()
    exported = json.loads(chat.get(f"/chat/{cid}/export.json").text)
    assert exported["messages"][0]["images"][0]["url"] == url
    assert f"![Image 1 (56x56)]({url})" in chat.get(f"/chat/{cid}/export.md").text

    # Edit and resend keeps the message's images, and their file.
    edit = chat.post(f"/chat/{cid}/messages/{user.position}/edit", data={"content": "And now?"}, headers=HTMX)
    assert edit.status_code == 200, edit.text
    chat.get(f"/chat/{cid}/events")
    edited, _ = saved(cid)
    assert edited.content == "And now?" and edited.images == user.images
    assert chat.get(f"/chat/images/{sha}").content == red


def test_images_go_with_the_last_conversation_attaching_them(chat: TestClient, red: bytes) -> None:
    first = first_message(chat, [("red.png", red)])
    second = first_message(chat, [("same.png", red), ("blue.png", png("blue"))], max_tokens="1")
    # Each image reaches the prompt as its tokens: (56 / 14)² patches merged 2x2 = 4 at least.
    one, two = (saved(cid)[1].stats or {} for cid in (first, second))
    assert two["prompt_tokens"] - one["prompt_tokens"] >= 4
    assert len(stored_files()) == 2  # the red image is kept once
    chat.post(f"/chat/{second}/delete")
    assert len(stored_files()) == 1  # blue went, red is still attached to the first chat
    chat.post(f"/chat/{first}/delete")
    assert stored_files() == []
    assert chat.get("/chat/images/" + "0" * 64).status_code == 404
    assert chat.get("/chat/images/..%2Fmlx-manager.db").status_code == 404
