"""Grammars for constrained decoding (llguidance's Lark dialect), built from tools' JSON Schemas.

- `blocks`: what every call grammar is made of (`%json` rules, literals, per-tool rules, the
  bounded repetition of parallel calls);
- `schema`: reading a schema for a grammar (which keywords constrain a value, references
  inlined, counts and bounds), shared by the two builders below;
- `values`: argument values in a structured syntax of its own, built keyword by keyword (Python
  literals for pythonic and Llama's built-in calls, Gemma 4's tokens);
- `parameters`: arguments as tagged raw text, one rule per parameter (GLM, Qwen3-Coder, MiniMax).

Two builders because the syntaxes differ in kind: a structured value nests (objects, arrays,
alternatives), raw text is one lexeme up to a closing tag, whose grammar is about keeping the
format's tags out of it. Formats whose arguments are JSON need neither: they embed the schema
with `%json`.
"""
