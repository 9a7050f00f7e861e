"""The prefix cache seen from a client: the real openai SDK's usage details count the prompt
tokens each request reused, and the admin pool shows the entries and their bytes."""

from __future__ import annotations

import anthropic
import httpx
import openai

from mlx_server.models.store import DEFAULT_MODEL_ID
from tests.support import ServerProcess

# Two ~150-token system prompts, as two agents (or an agent and its side requests) would send.
SYSTEMS = {
    "bakery": (
        "You are the assistant of a small family bakery in Lyon. You answer customers' questions "
        "about opening hours, bread, pastries, cakes for birthdays and weddings, allergens, prices "
        "and orders. The bakery opens from seven in the morning to seven in the evening, Tuesday "
        "to Sunday, and is closed on Mondays. Sourdough is baked twice a day; croissants sell out "
        "by ten. Orders for cakes need two days' notice and a deposit. Be friendly, brief and "
        "precise; never invent a product the bakery does not sell, and say so when you do not know. "
        "Deliveries are made within the city on Saturday mornings only, for orders over thirty euros."
    ),
    "railway": (
        "You help travellers plan train journeys across Europe. You know night trains, high-speed "
        "lines, regional connections, reservations, rail passes, luggage rules, bicycles on board "
        "and accessibility services. When asked about a route, give the usual changes, the typical "
        "duration and whether a seat reservation is required. Prices change often: give ranges and "
        "advise checking the operator's site. Answer in short sentences, in the traveller's "
        "language, and ask for the travel date when it matters for the answer you give them. "
        "When a strike or engineering works are likely, mention it and suggest an alternative route, "
        "and remind travellers with pets or bicycles to check the rules of each operator on the way."
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
                assert usage.prompt_tokens > 150
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
    assert ask("Do I need a reservation to Milan?") >= 140  # the whole system turn (~145 tokens)
