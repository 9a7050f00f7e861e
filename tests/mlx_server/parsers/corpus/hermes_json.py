"""hermes_json: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (Hermes 2 Pro / 3,
Qwen2.5, Qwen3, SmolLM), written from the Hermes-Function-Calling prompt and the Qwen chat
templates, which put the JSON on its own line between the tags and one block per call."""

from __future__ import annotations

from tests.mlx_server.parsers.corpus import ParserCase

WEATHER = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TIME = '<tool_call>\n{"name": "get_time", "arguments": {"timezone": "Europe/Berlin"}}\n</tool_call>'

CASES: list[ParserCase] = [
    ParserCase(
        name="close_tag_inside_an_argument_string",
        text='<tool_call>\n{"name": "write_file", "arguments": {"text": "ends with </tool_call> here"}}'
        + "\n</tool_call>",
        calls=[("write_file", {"text": "ends with </tool_call> here"})],
        content="",
    ),
    ParserCase(
        # SmolLM2-135M under a call grammar: the close tag typed inside the string it is writing.
        name="close_tag_typed_inside_a_string_then_the_real_one",
        text='<tool_call>\n{"name": "calculator", "arguments": {"expression": "}}</tool_call>12 * "}}'
        + "\n</tool_call>",
        calls=[("calculator", {"expression": "}}</tool_call>12 * "})],
        content="",
    ),
    ParserCase(
        name="no_call_plain_text",
        text="The weather in Paris is sunny today, 24 degrees.",
        content="The weather in Paris is sunny today, 24 degrees.",
    ),
    ParserCase(
        name="no_call_mentions_the_tags",
        text="Wrap each call in <tool_call></tool_call> tags with a JSON object inside.",
        content="Wrap each call in  tags with a JSON object inside.",
    ),
    ParserCase(
        name="single_call",
        text=WEATHER,
        calls=[("get_weather", {"city": "Paris"})],
        content="",
    ),
    ParserCase(
        name="content_before_call",
        text="Let me check.\n" + WEATHER,
        calls=[("get_weather", {"city": "Paris"})],
        content="Let me check.",
    ),
    ParserCase(
        name="parallel_calls",
        text=WEATHER + "\n" + TIME,
        calls=[("get_weather", {"city": "Paris"}), ("get_time", {"timezone": "Europe/Berlin"})],
        content="",
    ),
    ParserCase(
        name="content_before_between_after",
        text="I'll check both.\n" + WEATHER + "\nand then\n" + TIME + "\nDone.",
        calls=[("get_weather", {"city": "Paris"}), ("get_time", {"timezone": "Europe/Berlin"})],
        content="I'll check both.\n\nand then\n\nDone.",
    ),
    ParserCase(
        name="typed_arguments",
        text=(
            '<tool_call>\n{"name": "search_flights", "arguments": {"passengers": 2, "max_price": 199.5, '
            '"direct": true, "cabin": null, "route": {"from": "BER", "to": "LIS"}, '
            '"days": ["mon", "fri"]}}\n</tool_call>'
        ),
        calls=[
            (
                "search_flights",
                {
                    "passengers": 2,
                    "max_price": 199.5,
                    "direct": True,
                    "cabin": None,
                    "route": {"from": "BER", "to": "LIS"},
                    "days": ["mon", "fri"],
                },
            )
        ],
        content="",
    ),
    ParserCase(
        name="empty_arguments",
        text='<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>',
        calls=[("get_time", {})],
        content="",
    ),
    ParserCase(
        name="arguments_key_missing",
        text='<tool_call>{"name": "list_files"}</tool_call>',
        calls=[("list_files", {})],
        content="",
    ),
    ParserCase(
        name="escaped_strings_and_unicode",
        text=(
            '<tool_call>\n{"name": "write_file", "arguments": {"path": "notes/Zürich.txt", '
            '"content": "He said \\"hi\\"\\nline 2 \\\\ 東京 🌧"}}\n</tool_call>'
        ),
        calls=[("write_file", {"path": "notes/Zürich.txt", "content": 'He said "hi"\nline 2 \\ 東京 🌧'})],
        content="",
    ),
    ParserCase(
        name="arguments_as_json_string",
        text='<tool_call>\n{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}\n</tool_call>',
        calls=[("get_weather", {"city": "Paris"})],
        content="",
    ),
    ParserCase(
        name="single_quotes_and_trailing_commas",
        text="<tool_call>{'name': 'get_weather', 'arguments': {'city': 'Paris', 'days': 3,},}</tool_call>",
        calls=[("get_weather", {"city": "Paris", "days": 3})],
        content="",
    ),
    ParserCase(
        name="python_literals_and_prose_after_json",
        text=(
            '<tool_call>{"name": "set_alarm", "arguments": {"armed": True, "label": None}} '
            "I hope this helps</tool_call>"
        ),
        calls=[("set_alarm", {"armed": True, "label": None})],
        content="",
    ),
    ParserCase(
        name="markdown_fence_inside_tags",
        text=(
            'Sure.\n<tool_call>\n```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```\n'
            "</tool_call>"
        ),
        calls=[("get_weather", {"city": "Paris"})],
        content="Sure.",
    ),
    ParserCase(
        name="missing_closing_tag_at_end",
        text='Checking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n',
        calls=[("get_weather", {"city": "Paris"})],
        content="Checking.",
    ),
    ParserCase(
        name="truncated_json_and_tag",
        text='<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"',
        calls=[("get_weather", {"city": "Paris"})],
        content="",
    ),
    ParserCase(
        name="duplicated_opening_tag",
        text='<tool_call><tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>',
        calls=[("get_weather", {"city": "Paris"})],
        content="",
    ),
    ParserCase(
        name="two_objects_in_one_block",
        text=(
            '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
            '{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>'
        ),
        calls=[("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"})],
        content="",
    ),
    ParserCase(
        name="openai_function_wrapper",
        text=(
            '<tool_call>{"type": "function", "function": {"name": "get_weather", '
            '"arguments": "{\\"city\\": \\"Paris\\"}"}}</tool_call>'
        ),
        calls=[("get_weather", {"city": "Paris"})],
        content="",
    ),
    ParserCase(
        name="bare_object_without_tags",
        text='{"name": "get_weather", "arguments": {"city": "Paris"}}',
        calls=[("get_weather", {"city": "Paris"})],
        content="",
        tools=["get_weather"],
    ),
    ParserCase(
        name="bare_object_parameters_alias",
        text='{"name": "get_weather", "parameters": {"city": "Paris", "unit": "celsius"}}',
        calls=[("get_weather", {"city": "Paris", "unit": "celsius"})],
        content="",
        tools=["get_weather"],
    ),
    ParserCase(
        name="bare_array_of_calls",
        text=(
            '[{"name": "get_weather", "arguments": {"city": "Paris"}}, '
            '{"name": "get_time", "parameters": {"timezone": "Europe/Berlin"}}]'
        ),
        calls=[("get_weather", {"city": "Paris"}), ("get_time", {"timezone": "Europe/Berlin"})],
        content="",
        tools=["get_weather", "get_time"],
    ),
    ParserCase(
        name="bare_json_answer_is_not_a_call",
        text='{"name": "Ada Lovelace", "born": 1815}',
        content='{"name": "Ada Lovelace", "born": 1815}',
        tools=["lookup_person"],
    ),
    ParserCase(
        name="unrecoverable_not_json",
        text="<tool_call>\nget_weather city=Paris\n</tool_call>",
        content="get_weather city=Paris",
    ),
    ParserCase(
        name="unrecoverable_object_without_name",
        text='Hmm.<tool_call>{"arguments": {"city": "Paris"}}</tool_call>',
        content='Hmm.{"arguments": {"city": "Paris"}}',
    ),
    ParserCase(
        name="unrecoverable_arguments_not_an_object",
        text='<tool_call>{"name": "get_weather", "arguments": "Paris"}</tool_call>',
        content='{"name": "get_weather", "arguments": "Paris"}',
    ),
]
