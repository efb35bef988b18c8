"""What a chat template does with an agent's turns, found once per template by reading and rendering it.

Templates differ in what they take and no metadata says which: the variable that carries the tools
(`tools`; SmolLM3's `xml_tools`; none at all for Gemma 3 or Phi-4-mini, whose tools go in a system
message in our generic format), whether they write an assistant's `tool_calls` themselves, whether
they want `function.arguments` as the object transformers documents or as the client's JSON string
(DeepSeek's and Kimi's templates concatenate it), whether call ids must be 9 characters (Mistral's
raise otherwise) and whether a `tool` role exists (Gemma 3's raises on one). The variables come from
the template's syntax tree; the rest from rendering a small probe conversation, since only
rendering shows what a template really writes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from jinja2 import meta

from ...engine.transformers_lock import imported

TOOLS_VARIABLES = ("tools", "xml_tools")  # the name a template reads its tools from, in order of preference
PROBE_FUNCTION = "probe_function"
PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": PROBE_FUNCTION,
        "description": "A probe.",
        "parameters": {
            "type": "object",
            "properties": {"probe_key": {"type": "string", "description": "A key."}},
            "required": ["probe_key"],
        },
    },
}
PROBE_ARGUMENTS = {"probe_key": "probe_value"}
PROBE_RESULT = "probe result text"
LONG_ID, SHORT_ID = "call_probe_0", "prb000001"  # a client's usual id; Mistral's 9 alphanumerics


@dataclass(frozen=True)
class TemplateTraits:
    tools_variable: str | None  # the variable its tools section reads; None: it has none
    renders_calls: bool  # it writes an assistant's tool_calls itself
    string_arguments: bool  # it wants function.arguments as a JSON string, not an object
    short_ids: bool  # it wants call ids of exactly 9 alphanumerics
    tool_role: bool  # it renders a `tool` message (else results go in a user turn)


def template_traits(tokenizer, template: str) -> TemplateTraits:
    """The traits of `template` as rendered with `tokenizer`'s special tokens (found once per
    template; a few dozen are kept, as requests may bring their own)."""
    traits = _FOUND.get(template)
    if traits is None:
        if len(_FOUND) >= 64:
            _FOUND.clear()
        traits = _FOUND[template] = _traits(tokenizer, template)
    return traits


_FOUND: dict[str, TemplateTraits] = {}


def _render(tokenizer, template: str, messages: list[dict], tools_variable: str | None) -> str | None:
    """A probe's text, or None where the template refuses the messages (given a tool where it reads
    some, as some iterate them unguarded, else without one, as some refuse a made-up tool)."""
    for tools in ({tools_variable: [PROBE_TOOL]}, {}) if tools_variable else ({},):
        try:
            return tokenizer.apply_chat_template(messages, chat_template=template, tokenize=False, **tools)
        except Exception:  # a template raises for what it does not take: that is the answer sought
            continue
    return None


def _traits(tokenizer, template: str) -> TemplateTraits:
    variables = _variables(template)
    tools_variable = next((name for name in TOOLS_VARIABLES if name in variables), None)
    renders_calls, string_arguments, short_ids = False, False, False
    for string_arguments, short_ids in ((False, False), (False, True), (True, False), (True, True)):
        text = _render(tokenizer, template, _probe_calls(string_arguments, short_ids), tools_variable)
        if text is not None and "probe_value" in text and "'probe_key'" not in text:  # written, not a Python repr
            renders_calls = True
            break
    if not renders_calls:
        string_arguments, short_ids = False, False
    result = _render(tokenizer, template, _probe_result(renders_calls, string_arguments, short_ids), tools_variable)
    return TemplateTraits(
        tools_variable, renders_calls, string_arguments, short_ids, result is not None and PROBE_RESULT in result
    )


def _variables(template: str) -> set[str]:
    """The names a template reads from its context (transformers' own environment parses it: its
    extensions' tags included); where it cannot, the tools variables its text names."""
    try:
        compile_template = imported("transformers.utils.chat_template_utils")._compile_jinja_template
        environment = compile_template(template).environment
        return meta.find_undeclared_variables(environment.parse(template))
    except Exception:  # a template transformers cannot parse (or a transformers without this helper)
        return {name for name in TOOLS_VARIABLES if re.search(rf"\b{name}\b", template)}


def _probe_calls(string_arguments: bool, short_ids: bool) -> list[dict]:
    arguments = '{"probe_key": "probe_value"}' if string_arguments else dict(PROBE_ARGUMENTS)
    call = {
        "id": SHORT_ID if short_ids else LONG_ID,
        "type": "function",
        "function": {"name": PROBE_FUNCTION, "arguments": arguments},
    }
    return [{"role": "user", "content": "probe question"}, {"role": "assistant", "content": "", "tool_calls": [call]}]


def _probe_result(renders_calls: bool, string_arguments: bool, short_ids: bool) -> list[dict]:
    """A tool result after its call (some templates file a result under its call), or after a
    plain answer where the template writes no calls."""
    turns = _probe_calls(string_arguments, short_ids) if renders_calls else _probe_calls(False, short_ids)[:1]
    if not renders_calls:
        turns.append({"role": "assistant", "content": "probe answer"})
    call_id = SHORT_ID if short_ids else LONG_ID
    return [*turns, {"role": "tool", "tool_call_id": call_id, "name": PROBE_FUNCTION, "content": PROBE_RESULT}]
