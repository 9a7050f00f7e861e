"""The prefix cache seen from a client: the real openai SDK's usage details count the prompt
tokens each request reused, and the admin pool shows the entries and their bytes."""

from __future__ import annotations

import anthropic
import httpx
import openai

from mlx_server.models.store import DEFAULT_MODEL_ID
from tests.support import ServerProcess

# Two system prompts (~35 tokens each), as two agents (or an agent and its side requests) would
# send; prefill runs ~10 tokens/s on this CPU, and a short prefix proves reuse as well as a long one.
SYSTEMS = {
    "bakery": (
        "You are the assistant of a small family bakery in Lyon. It opens from seven to seven, "
        "Tuesday to Sunday; cakes need two days' notice. Be friendly and brief."
    ),
    "railway": (
        "You help travellers plan train journeys across Europe: night trains, high-speed lines, "
        "reservations and rail passes. Give the usual changes and the duration, briefly."
    ),
}
QUESTIONS = ["Hello, can you help me?", "What should I know first?", "Thanks, anything else?"]


def test_alternating_conversations_each_reuse_their_own_prefix(inference_server: ServerProcess) -> None:
    oai = openai.OpenAI(base_url=f"{inference_server.url}/v1", api_key="x", max_retries=0, timeout=300)
    conversations = {name: [{"role": "system", "content": text}] for name, text in SYSTEMS.items()}
    previous_prompt = dict.fromkeys(SYSTEMS, 0)
    for round_no, question in enumerate(QUESTIONS):
        for name, messages in conversations.items():  # bakery, railway, bakery, railway, ...
            messages.append({"role": "user", "content": question})
            reply = oai.chat.completions.create(
                model=DEFAULT_MODEL_ID,
                messages=messages,  # type: ignore[arg-type]  # plain dicts, as clients send them
                temperature=0,
                max_tokens=8,
            )
            messages.append({"role": "assistant", "content": reply.choices[0].message.content or ""})
            usage = reply.usage
            assert usage is not None and usage.prompt_tokens_details is not None
            cached = usage.prompt_tokens_details.cached_tokens or 0
            if round_no == 0:
                assert usage.prompt_tokens > 50  # the system prompt and the question
            else:
                # The whole previous prompt of this conversation, though the other one came between.
                assert cached >= previous_prompt[name], (name, round_no, cached, previous_prompt[name])
            assert cached < usage.prompt_tokens  # at least the last prompt token is computed
            previous_prompt[name] = usage.prompt_tokens

    pool = httpx.get(f"{inference_server.url}/v1/admin/pool", timeout=10).json()
    cache = next(m for m in pool["models"] if m["id"] == DEFAULT_MODEL_ID)["prompt_cache"]
    assert cache["entries"] >= 2 and 0 < cache["bytes"] <= cache["max_bytes"]
    assert pool["prompt_cache_bytes"] >= cache["bytes"]


def test_anthropic_usage_counts_the_cached_prefix(claude: anthropic.Anthropic) -> None:
    def ask(question: str) -> int:
        reply = claude.messages.create(
            model=DEFAULT_MODEL_ID,
            system=SYSTEMS["railway"],
            messages=[{"role": "user", "content": question}],
            max_tokens=4,
        )
        return reply.usage.cache_read_input_tokens or 0

    ask("Is there a night train to Vienna?")
    assert ask("Do I need a reservation to Milan?") >= 35  # the whole system turn (~38 tokens)
