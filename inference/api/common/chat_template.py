"""Chat messages -> prompt text, with the tokenizer's own chat template.

Rendering only runs Jinja (no tokenization), so it is safe on the event loop while the engine
thread uses the same tokenizer.
"""

from __future__ import annotations

import logging

from django.conf import settings

from .errors import bad_request
from .tool_calls import ToolRequest, active_tools, render_tools_prompt
from .tool_parsers import ToolParser, tool_parser_for

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
) -> str:
    """The prompt text; `tools` go through the template's own tools section where it has one, else
    into a system message (api/common/tool_calls.py's generic prompt, asking for `tool_parser`'s format:
    by default the served model's). `continue_final`: the last (assistant) message is left open
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
    if tools and template and "tools" in template:
        extra["tools"] = tools
    elif tools:
        messages = with_tools_prompt(messages, tools, tool_parser or tool_parser_for(tokenizer))
    if continue_final:
        add_generation_prompt = False
        extra["continue_final_message"] = True
    try:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt, **extra)
    except Exception as exc:  # templates raise for e.g. role orders they do not allow
        raise bad_request(f"messages do not fit the model's chat template: {exc}", param="messages") from None


def render_request(
    tokenizer, messages: list[dict], tools: ToolRequest | None, *, options: dict | None = None, continue_final: bool = False
) -> str:
    """`render` for a request's messages and its ToolRequest: the tools go in when they are in play,
    calls are written in the request's parser's format."""
    active = active_tools(tools)
    parser = tools.parser if tools is not None else None
    return render(
        tokenizer,
        messages,
        tools=active.tools if active else None,
        tool_parser=parser,
        continue_final=continue_final,
        options=options,
    )


def with_tools_prompt(messages: list[dict], tools: list[dict], tool_parser: ToolParser) -> list[dict]:
    """The tools' description at the end of the system message (one is added if there is none)."""
    prompt = render_tools_prompt(tools, tool_parser)
    if messages and messages[0]["role"] == "system":
        return [{"role": "system", "content": messages[0]["content"] + "\n\n" + prompt}, *messages[1:]]
    return [{"role": "system", "content": prompt}, *messages]
