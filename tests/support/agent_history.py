"""One agent conversation (two tool turns with a plain answer between them) as each API's client
sends it, the prompt each API renders for it, and the same history as transformers' templates take
it: the reference tests/api/test_agent_history.py holds every API to.

Call ids are 9 alphanumerics, so Mistral's templates (which refuse any other) take the client's
history as it is; `openai_ids` gives the same history with OpenAI's `call_...` ids."""

from __future__ import annotations

import json
from types import SimpleNamespace

from inference.api.anthropic.request import parse_messages_request
from inference.api.common.chat_template import render_request
from inference.api.common.tool_parsers import tool_parser_for
from inference.api.llama.tokenizer_views import _tokenized
from inference.api.openai.request import parse_chat
from inference.api.responses.request import parse_responses_request
from tests.support.tool_conversation import TOOLS, transformers_messages

SYSTEM = "You are a weather assistant. Be brief."
HISTORY = [
    {"role": "system", "content": SYSTEM},
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": "Let me check.",
        "tool_calls": [
            {
                "id": "call00001",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris", "days": 2}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call00001", "content": "18 C, sunny"},
    {"role": "assistant", "content": "It is sunny in Paris, 18 C."},
    {"role": "user", "content": "And the news there?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call00002",
                "type": "function",
                "function": {"name": "search", "arguments": '{"query": "Paris news", "exact": true}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call00002", "content": "Nothing new."},
]
# two calls in one turn, for the templates that take parallel calls (Llama 3's refuse them)
PARALLEL = [
    *HISTORY[:2],
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "call00001", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
            {"id": "call00002", "type": "function", "function": {"name": "search", "arguments": '{"query": "Paris news"}'}},
        ],
    },
    {"role": "tool", "tool_call_id": "call00001", "content": "18 C, sunny"},
    {"role": "tool", "tool_call_id": "call00002", "content": "Nothing new."},
]


def reference_messages(history: list[dict]) -> list[dict]:
    """The history as transformers' templates take it: arguments as objects, each result naming its call."""
    names = {c["id"]: c["function"]["name"] for m in history for c in m.get("tool_calls") or ()}
    return [{**m, "name": names[m["tool_call_id"]]} if m["role"] == "tool" else m for m in transformers_messages(history)]


def openai_ids(history: list[dict]) -> list[dict]:
    """The same history with the ids OpenAI's API gives calls (`call_` and 24 characters)."""
    text = json.dumps(history)
    for number in (1, 2):
        text = text.replace(f"call0000{number}", f"call_{number:024d}")
    return json.loads(text)


def chat_prompt(tokenizer, history: list[dict], **fields) -> str:
    inp = parse_chat({"messages": history, "tools": TOOLS, **fields}, tool_parser_for(tokenizer))
    return render_request(tokenizer, inp.messages, inp.tools, options=inp.template_options)


def responses_body(history: list[dict]) -> dict:
    """The history as a Responses client sends it: instructions, message and function call items."""
    items = []
    for message in history[1:]:
        if message["role"] == "tool":
            items.append({"type": "function_call_output", "call_id": message["tool_call_id"], "output": message["content"]})
            continue
        if message["role"] == "user":
            items.append({"type": "message", "role": "user", "content": message["content"]})
        elif message["content"]:
            items.append(
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": message["content"]}]}
            )
        for call in message.get("tool_calls") or ():
            function = call["function"]
            items.append(
                {"type": "function_call", "call_id": call["id"], "name": function["name"], "arguments": function["arguments"]}
            )
    tools = [{"type": "function", **tool["function"]} for tool in TOOLS]
    return {"model": "m", "instructions": history[0]["content"], "input": items, "tools": tools}


def responses_prompt(tokenizer, history: list[dict]) -> str:
    _, request = parse_responses_request(responses_body(history), tool_parser_for(tokenizer))
    prompt = request.prompt
    return render_request(tokenizer, prompt.conversation([]), prompt.tools, options=prompt.template_options)


def anthropic_body(history: list[dict]) -> dict:
    """The history as an Anthropic client sends it: text and tool_use blocks, tool_result blocks in a user turn."""
    messages = []
    for message in history[1:]:
        if message["role"] == "tool":
            block = {"type": "tool_result", "tool_use_id": message["tool_call_id"], "content": message["content"]}
            if messages[-1]["role"] == "user" and isinstance(messages[-1]["content"], list):
                messages[-1]["content"].append(block)
            else:
                messages.append({"role": "user", "content": [block]})
        elif message.get("tool_calls"):
            blocks = [{"type": "text", "text": message["content"]}] if message["content"] else []
            blocks += [
                {
                    "type": "tool_use",
                    "id": c["id"],
                    "name": c["function"]["name"],
                    "input": json.loads(c["function"]["arguments"]),
                }
                for c in message["tool_calls"]
            ]
            messages.append({"role": "assistant", "content": blocks})
        else:
            messages.append({"role": message["role"], "content": message["content"]})
    tools = [
        {"name": t["function"]["name"], "description": t["function"]["description"], "input_schema": t["function"]["parameters"]}
        for t in TOOLS
    ]
    return {"model": "m", "max_tokens": 64, "system": history[0]["content"], "messages": messages, "tools": tools}


def anthropic_prompt(tokenizer, history: list[dict]) -> str:
    _, prompt = parse_messages_request(anthropic_body(history), tool_parser_for(tokenizer))
    return render_request(
        tokenizer, prompt.messages, prompt.tools, options=prompt.template_options, continue_final=prompt.continue_final
    )


def tokenized(tokenizer, history: list[dict]) -> list[int]:
    """/tokenize's tokens for the history and tools (its handler, run as the view runs it)."""
    return _tokenized(SimpleNamespace(tokenizer=tokenizer, max_model_len=32768), {"messages": history, "tools": TOOLS})["tokens"]


API_PROMPTS = {"chat": chat_prompt, "responses": responses_prompt, "anthropic": anthropic_prompt}
# the template arguments each API's request sets without being asked: Anthropic's default is no thinking
API_TEMPLATE_KWARGS = {"chat": {}, "responses": {}, "anthropic": {"enable_thinking": False}}
