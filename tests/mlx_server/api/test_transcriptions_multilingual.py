"""The real multilingual Whisper base (faster-whisper-base, converted from its CTranslate2 wheels
by our importer): French that espeak-ng speaks is translated to English by
/v1/audio/translations and written down in French by /v1/audio/transcriptions with language=fr.
One test: each request encodes a 30 s window, seconds of CPU here."""

from __future__ import annotations

from pathlib import Path

import openai

from tests.fixtures.speech_clips import speak
from tests.mlx_server.api.conftest import standalone_server

MODEL = "whisper-base"
FRENCH = "Bonjour, je m'appelle Marie et j'habite à Paris depuis dix ans."


def _words(text: str) -> set[str]:
    return {"".join(c for c in word if c.isalpha()) for word in text.lower().split()}


def test_french_speech_is_translated_to_english_and_transcribed_in_french(
    home: Path, whisper_base_dir: Path, tmp_path: Path
) -> None:
    clip = speak(FRENCH, tmp_path / "french.wav", voice="fr")
    with standalone_server({MODEL: whisper_base_dir}) as server:
        sdk = openai.OpenAI(base_url="http://testserver/v1", api_key="x", http_client=server, max_retries=0)
        with clip.open("rb") as audio:
            english = sdk.audio.translations.create(model=MODEL, file=audio, temperature=0).text
        with clip.open("rb") as audio:
            french = sdk.audio.transcriptions.create(
                model=MODEL, file=audio, language="fr", temperature=0
            ).text
    # espeak-ng's French is robotic and Whisper base small: the names and the language must come
    # through ("I called Maria and I went to Paris..." and "... je m'appelle Marie ..." here).
    heard_english, heard_french = _words(english), _words(french)
    assert {"paris", "and"} <= heard_english and _names_marie(heard_english), english
    assert not {"je", "et", "suis"} & heard_english, english
    assert "je" in heard_french and _names_marie(heard_french), french
    assert not {"my", "name", "and", "the"} & heard_french, french


def _names_marie(words: set[str]) -> bool:
    return any(word.startswith("mari") for word in words)
