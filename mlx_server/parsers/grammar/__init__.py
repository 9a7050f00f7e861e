"""Grammars for constrained decoding (llguidance's Lark dialect), built from tools' JSON Schemas.

- `blocks`: what every call grammar is made of (`%json` rules, literals, per-tool rules, the
  bounded repetition of parallel calls);
- `schema`: reading a parameters schema (references inlined, which keywords it uses);
- `values`: argument values in a syntax of its own, built keyword by keyword (Python literals
  for pythonic and Llama's built-in calls, Gemma 4's tokens);
- `parameters`: arguments as tagged raw text, one rule per parameter (GLM, Qwen3-Coder, MiniMax).
"""
