"""Chat messages -> prompt text, with the tokenizer's own chat template.

Messages arrive as the chat APIs keep them (api/common/chat_messages.py: calls as `tool_calls`
objects, results naming their call) and go to the template as it takes them
(api/common/template_traits.py says how): the tools through the variable it reads, else described in
a system message in our generic format; calls as objects (arguments as strings, ids as 9
alphanumerics, where the template wants those), else written into the assistant's content in the
served model's format; results as `tool` messages, else one user turn. An assistant turn whose
content holds calls in a format whose templates write calls themselves (Qwen3.5's XML blocks, Gemma
4's notation: a stored reply, say) is read back into `tool_calls` first (`with_call_objects`).

Rendering only runs Jinja (no tokenization), so it is safe on the event loop while the engine
thread uses the same tokenizer; but a request with `truncation` in its options (Responses'
`truncation: "auto"`) is tokenized to fit the context, so it is rendered in a worker thread.
"""

from __future__ import annotations

import hashlib
import json
import logging
import string

from django.conf import settings

from ...engine.prompt import prompt_token_ids
from .errors import ApiError, bad_request
from .template_traits import TemplateTraits, template_traits
from .tool_calls import ToolRequest, active_tools, render_tools_prompt, results_text
from .tool_parsers import ANY_FUNCTION, ToolParser, tool_parser_for

log = logging.getLogger("inference.chat")


def render(
    tokenizer,
    messages: list[dict],
    *,
    add_generation_prompt: bool = True,
    tools: list[dict] | None = None,
    tool_parser: ToolParser | None = None,
    continue_final: bool = False,
    options: dict | None = None,
    calling: bool = True,
) -> str:
    """The prompt text; `tools` go through the template's own tools section where it has one, else
    into a system message (api/common/tool_calls.py's generic prompt, asking for `tool_parser`'s format:
    by default the served model's; `calling` False, tool_choice "none": asking for no call).
    `continue_final`: the last (assistant) message is left open
    for the reply to continue (a prefill), with no generation prompt after it. `options`: what the
    request set (GenerationInput.template_options): template `kwargs` (e.g. enable_thinking), its
    own `template`, `add_generation_prompt`, `continue_final`."""
    options = options or {}
    add_generation_prompt = options.get("add_generation_prompt", add_generation_prompt)
    continue_final = options.get("continue_final", continue_final)
    template = options.get("template") or settings.MINIVLLM_CHAT_TEMPLATE or getattr(tokenizer, "chat_template", None)
    if not template:
        raise bad_request(
            "the model has no chat template (a base model's file carries none): send a prompt to /v1/completions, "
            "or start the server with MINIVLLM_CHAT_TEMPLATE set to one",
            param="messages",
        )
    extra = dict(options.get("kwargs", {}))
    if "template" in options or settings.MINIVLLM_CHAT_TEMPLATE:
        extra["chat_template"] = template
    tool_parser = tool_parser or tool_parser_for(tokenizer)
    traits = template_traits(tokenizer, template)
    if tools and traits.tools_variable:
        extra[traits.tools_variable] = tools
    elif tools:
        messages = with_tools_prompt(messages, tools, tool_parser, calling=calling)
    messages = as_template_takes(messages, traits, tool_parser, keep_last=continue_final)
    if continue_final:
        add_generation_prompt = False
        extra["continue_final_message"] = True
    try:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt, **extra)
    except Exception as exc:  # templates raise for e.g. role orders they do not allow
        raise bad_request(f"messages do not fit the model's chat template: {exc}", param="messages") from None


def render_request(
    tokenizer,
    messages: list[dict],
    tools: ToolRequest | None,
    *,
    options: dict | None = None,
    continue_final: bool = False,
    token_limit: int | None = None,
) -> str:
    """`render` for a request's messages and its ToolRequest: the tools go in whenever the request
    offers them, tool_choice "none" included (the model sees them and must not call: as vLLM and
    OpenAI do); calls are written in the request's parser's format. With `options["truncation"]`
    ({"reserve": tokens}), a prompt that would not leave `reserve` tokens of the model's context
    (`token_limit`) loses its oldest turns (`fitted`)."""
    parser = tools.parser if tools is not None else None

    def text_of(kept: list[dict]) -> str:
        return render(
            tokenizer,
            kept,
            tools=tools.tools if tools is not None and tools.tools else None,
            tool_parser=parser,
            continue_final=continue_final,
            options=options,
            calling=active_tools(tools) is not None,
        )

    fit = (options or {}).get("truncation")
    if not fit:
        return text_of(messages)
    return fitted(tokenizer, messages, text_of, _prompt_room(fit["reserve"], token_limit))


def _prompt_room(reserve: int, token_limit: int | None) -> int | None:
    """The most prompt tokens the model takes beside `reserve` tokens of reply (None: unknown)."""
    rooms = [token_limit - reserve] if token_limit else []
    if settings.MINIVLLM_MAX_PROMPT_TOKENS > 0:
        rooms.append(settings.MINIVLLM_MAX_PROMPT_TOKENS)
    return min(rooms) if rooms else None


def fitted(tokenizer, messages: list[dict], text_of, room: int | None) -> str:
    """The prompt of `messages`, or, where it holds more than `room` tokens, of the fewest of its
    oldest turns dropped that fits (OpenAI's `truncation: "auto"`): the leading system message
    stays, so does the last message, and a cut never leaves a tool result first (its call went
    with the cut). Where nothing fits, the shortest is returned and the engine refuses it as too
    long. Found by bisection: each try renders and tokenizes once."""
    text = text_of(messages)
    if room is None or len(prompt_token_ids(tokenizer, text)) <= room:
        return text
    head = messages[:1] if messages and messages[0]["role"] == "system" else []
    turns = messages[len(head) :]
    cuts = [k for k in range(1, len(turns)) if turns[k]["role"] != "tool"]
    best, low, high = None, 0, len(cuts) - 1
    while low <= high:
        middle = (low + high) // 2
        try:
            candidate = text_of(head + turns[cuts[middle] :])
        except ApiError:  # a template that refuses the turns as they start there: cut further
            candidate = None
        if candidate is not None and len(prompt_token_ids(tokenizer, candidate)) <= room:
            best, high = candidate, middle - 1
        else:
            low = middle + 1
    if best is not None:
        return best
    return text_of(head + turns[cuts[-1] :]) if cuts else text


def with_tools_prompt(messages: list[dict], tools: list[dict], tool_parser: ToolParser, *, calling: bool = True) -> list[dict]:
    """The tools' description at the end of the system message (one is added if there is none)."""
    prompt = render_tools_prompt(tools, tool_parser, calling=calling)
    if messages and messages[0]["role"] == "system":
        return [{"role": "system", "content": messages[0]["content"] + "\n\n" + prompt}, *messages[1:]]
    return [{"role": "system", "content": prompt}, *messages]


def as_template_takes(messages: list[dict], traits: TemplateTraits, tool_parser: ToolParser, *, keep_last: bool) -> list[dict]:
    """The messages in the shapes `traits` says the template takes (module docstring)."""
    if traits.renders_calls and tool_parser.template_calls:
        messages = with_call_objects(messages, tool_parser, keep_last=keep_last)
    short = _short_ids(messages) if traits.short_ids else {}
    written, gathering = [], None  # `gathering`: the user turn results go in, where the template has no tool role
    for message in messages:
        calls = message.get("tool_calls")
        if calls and not traits.renders_calls:
            text = tool_parser.calls_text([(c["function"]["name"], c["function"]["arguments"]) for c in calls])
            kept = {key: value for key, value in message.items() if key != "tool_calls"}
            message = {**kept, "content": (message["content"] + "\n" if message["content"] else "") + text}
        elif calls:
            message = {**message, "tool_calls": [_call_as_taken(call, traits, short) for call in calls]}
        if message["role"] == "tool" and short and message.get("tool_call_id") in short:
            message = {**message, "tool_call_id": short[message["tool_call_id"]]}
        if message["role"] == "tool" and not traits.tool_role:
            block = results_text([{"name": message.get("name"), "content": message["content"]}])
            if gathering is not None:
                gathering["content"] += "\n" + block
                continue
            message = gathering = {"role": "user", "content": block}
        elif message["role"] == "user" and gathering is not None:
            gathering["content"] += "\n\n" + message["content"]  # the user's next words join it: roles alternate
            gathering = None
            continue
        else:
            gathering = None
        written.append(message)
    return written


def _call_as_taken(call: dict, traits: TemplateTraits, short: dict[str, str]) -> dict:
    function = call["function"]
    if traits.string_arguments and not isinstance(function["arguments"], str):
        function = {**function, "arguments": json.dumps(function["arguments"], ensure_ascii=False)}
    return {**call, "id": short.get(call["id"], call["id"]), "function": function}


def _short_ids(messages: list[dict]) -> dict[str, str]:
    """Each call id that is not 9 alphanumerics -> one that is, the same for its call and its
    result (Mistral's templates refuse other ids; clients send OpenAI's `call_...`)."""
    ids = {call["id"] for m in messages for call in m.get("tool_calls") or ()} | {
        m["tool_call_id"] for m in messages if m["role"] == "tool" and m.get("tool_call_id")
    }
    alphabet = string.ascii_letters + string.digits
    short = {}
    for call_id in sorted(ids):
        if len(call_id) == 9 and call_id.isalnum():
            continue
        number = int.from_bytes(hashlib.sha256(call_id.encode()).digest()[:8], "big")
        short[call_id] = "".join(alphabet[(number // len(alphabet) ** k) % len(alphabet)] for k in range(9))
    return short


def with_call_objects(messages: list[dict], tool_parser: ToolParser, *, keep_last: bool = False) -> list[dict]:
    """The messages with each assistant turn's calls (in its content, in `tool_parser`'s format)
    read back into `tool_calls` objects, and each tool result after them naming its call
    (`tool_call_id`, `name`) by position, as llama.cpp pairs them: the template then writes the
    calls, and results it files under their call (Gemma 4's), as it writes a client's own.
    `keep_last`: the last message is a prefill the reply continues, left as it is."""
    written, waiting = [], []
    for index, message in enumerate(messages):
        role = message.get("role")
        if (
            role == "assistant"
            and "tool_calls" not in message
            and isinstance(message.get("content"), str)
            and not (keep_last and index == len(messages) - 1)
        ):
            content, calls = tool_parser.parse_format(message["content"], ANY_FUNCTION)
            waiting = [(f"call_{index}_{number}", name) for number, (name, _) in enumerate(calls)]
            if calls:
                objects = [
                    {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
                    for (call_id, name), (_, arguments) in zip(waiting, calls)
                ]
                message = {**message, "content": content or "", "tool_calls": objects}
        elif role == "tool" and waiting:
            call_id, name = waiting.pop(0)
            message = {"tool_call_id": call_id, "name": name, **message}
        elif role != "tool":
            waiting = []
        written.append(message)
    return written
