"""Speech to text (blueprint §4.4 `services/audio.py`, the STT half): uploads to timed text."""
