"""A conversation with tools as an OpenAI client sends it (arguments as JSON strings, each result
naming its call), and the same messages as transformers' chat templates take them: the tests that
hold our rendering to the official templates' (tests/api/test_tools_qwen35.py, test_tools_gemma4.py)
share it."""

from __future__ import annotations

import json

from inference.api.common.chat_template import render_request
from inference.api.common.tool_parsers import tool_parser_for
from inference.api.openai.request import parse_chat

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}, "unit": {"enum": ["c", "f"]}},
            "required": ["city"],
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the news.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}, "exact": {"type": "boolean"}, "filters": {"type": "object"}},
            "required": ["query"],
        },
    },
}
TOOLS = [WEATHER, SEARCH]
FUNCTIONS = {tool["function"]["name"]: tool["function"]["parameters"] for tool in TOOLS}
CALLS = [
    ("get_weather", {"city": "Paris", "days": 2}),
    ("search", {"query": "Paris news", "exact": True, "filters": {"lang": "fr", "sources": ["Le Monde", "Libé"]}}),
]
ASK = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris, and any news?"}]
# as an OpenAI client sends an earlier turn: arguments as JSON strings, results naming their call
CALLED = [
    *ASK,
    {
        "role": "assistant",
        "content": "Let me check.",
        "tool_calls": [
            {"id": f"c{number}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
            for number, (name, arguments) in enumerate(CALLS)
        ],
    },
    {"role": "tool", "tool_call_id": "c0", "content": "18 C, sunny"},
    {"role": "tool", "tool_call_id": "c1", "content": "Nothing new."},
]

# the thinking switch: (what a chat request sets, the template arguments transformers gets for it)
THINKING = {
    "thinking by default": ({}, {}),
    "enable_thinking true": ({"chat_template_kwargs": {"enable_thinking": True}}, {"enable_thinking": True}),
    "enable_thinking false": ({"chat_template_kwargs": {"enable_thinking": False}}, {"enable_thinking": False}),
    "reasoning_effort none": ({"reasoning_effort": "none"}, {"enable_thinking": False, "reasoning_effort": "none"}),
}


def transformers_messages(messages: list[dict]) -> list[dict]:
    """The messages as transformers' templates take them (vLLM does the same): arguments as objects."""
    converted = []
    for message in messages:
        calls = message.get("tool_calls")
        if calls:
            calls = [{**c, "function": {**c["function"], "arguments": json.loads(c["function"]["arguments"])}} for c in calls]
            message = {**message, "tool_calls": calls}
        converted.append(message)
    return converted


def chat_prompt(tokenizer, body: dict):
    """(the prompt /v1/chat/completions renders for `body` with TOOLS, the parsed request), the
    served model's parser chosen from the tokenizer's template as the server chooses it."""
    inp = parse_chat({"tools": TOOLS, **body}, tool_parser_for(tokenizer))
    return render_request(tokenizer, inp.messages, inp.tools, options=inp.template_options), inp
