"""Whether a text is the start of a JSON text (RFC 8259). A reply that JSON-constrained decoding
cut at max_tokens is not a whole document, yet every token of it was allowed by the grammar: it
must still be a prefix that some continuation completes. json.loads cannot say so, and lenient
partial parsers accept text after the value ends, so this is a strict scanner of its own."""

from __future__ import annotations

WHITESPACE = " \t\n\r"
DIGITS = "0123456789"
HEX = DIGITS + "abcdefABCDEF"
ESCAPES = '"\\/bfnrt'
LITERALS = {"t": "true", "f": "false", "n": "null"}
# number states (-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?) and which of them end a number
NUMBER_STEPS = {
    "sign": {"0": "zero", **dict.fromkeys("123456789", "int")},
    "zero": {".": "dot", "e": "exp", "E": "exp"},
    "int": {**dict.fromkeys(DIGITS, "int"), ".": "dot", "e": "exp", "E": "exp"},
    "dot": dict.fromkeys(DIGITS, "frac"),
    "frac": {**dict.fromkeys(DIGITS, "frac"), "e": "exp", "E": "exp"},
    "exp": {"+": "exp_sign", "-": "exp_sign", **dict.fromkeys(DIGITS, "exp_digits")},
    "exp_sign": dict.fromkeys(DIGITS, "exp_digits"),
    "exp_digits": dict.fromkeys(DIGITS, "exp_digits"),
}
NUMBER_ENDS = {"zero", "int", "frac", "exp_digits"}


def is_json_prefix(text: str) -> bool:
    """True when some continuation makes `text` exactly one JSON value (whitespace around it allowed);
    a whole document is its own prefix. False at the first character no continuation could follow."""
    stack: list[str] = []  # the open containers, "{" or "["
    mode = "value"
    key = False  # the string being read is an object's key
    pending = ""  # a literal's characters still to come, or the hex digits of a \u escape
    number = ""  # the number's state while mode is "number"
    i = 0
    while i < len(text):
        c = text[i]
        i += 1
        if mode == "string":
            if c == '"':
                mode = "colon" if key else "after"
            elif c == "\\":
                mode = "escape"
            elif ord(c) < 0x20:
                return False
        elif mode == "escape":
            if c == "u":
                mode, pending = "unicode", "xxxx"
            elif c in ESCAPES:
                mode = "string"
            else:
                return False
        elif mode == "unicode":
            if c not in HEX:
                return False
            pending = pending[1:]
            mode = "unicode" if pending else "string"
        elif mode == "literal":
            if c != pending[0]:
                return False
            pending = pending[1:]
            mode = "literal" if pending else "after"
        elif mode == "number":
            step = NUMBER_STEPS[number].get(c)
            if step is not None:
                number = step
            elif number in NUMBER_ENDS:
                mode, i = "after", i - 1  # the number ended: read this character again after it
            else:
                return False
        elif c in WHITESPACE:
            continue
        elif mode in ("value", "value_or_close"):
            if mode == "value_or_close" and c == "]":
                stack.pop()
                mode = "after"
            elif c in "{[":
                stack.append(c)
                mode = "key_or_close" if c == "{" else "value_or_close"
            elif c == '"':
                mode, key = "string", False
            elif c in LITERALS:
                mode, pending = "literal", LITERALS[c][1:]
            elif c == "-" or c in DIGITS:
                mode, number = "number", NUMBER_STEPS["sign"][c] if c != "-" else "sign"
            else:
                return False
        elif mode in ("key", "key_or_close"):
            if mode == "key_or_close" and c == "}":
                stack.pop()
                mode = "after"
            elif c == '"':
                mode, key = "string", True
            else:
                return False
        elif mode == "colon":
            if c != ":":
                return False
            mode = "value"
        elif mode == "after":
            if not stack:
                return False  # the value is complete: only whitespace may follow
            if c == "," and stack[-1] == "{":
                mode = "key"
            elif c == "," and stack[-1] == "[":
                mode = "value"
            elif c == {"{": "}", "[": "]"}[stack[-1]]:
                stack.pop()
            else:
                return False
    return True
