"""The protocols' side of the pipeline: each API's request turned into a GenerationRequest, and
the pipeline's events rendered in its shape (OpenAI, Anthropic, Responses, Ollama)."""
