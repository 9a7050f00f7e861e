"""The generation engine: tokens in, text pieces out, on the MLX thread (batched or solo), with
sampling, stop strings, grammars and images; it knows no protocol."""
