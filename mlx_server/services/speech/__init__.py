"""Text to speech (blueprint §4.4, `services/audio.py::generate_speech`): text in, encoded audio
streamed out as the model produces it."""
