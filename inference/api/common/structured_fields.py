"""The structured-output fields: chat's response_format, vLLM's guided_* on both OpenAI endpoints,
llama-server's json_schema / grammar on /generate. At most one per request; each becomes the spec
engine/sample/structured.py compiles (before the request is queued, so an invalid one is a 400)."""

from __future__ import annotations

import json

from .errors import bad_request
from .sampling_fields import expect

# vLLM's extras for constrained decoding, on both OpenAI endpoints (chat also takes response_format)
GUIDED_FIELDS = {"guided_json": "json_schema", "guided_regex": "regex", "guided_choice": "choice", "guided_grammar": "grammar"}
# vLLM's newer form of the same, on both OpenAI endpoints: {"structured_outputs": {"json": ...}}
STRUCTURED_OUTPUTS_KEYS = {"json": "json_schema", "regex": "regex", "choice": "choice", "grammar": "grammar"}
# llama-server's names on /generate
GENERATE_GUIDED_FIELDS = {"json_schema": "json_schema", "grammar": "grammar"}


def structured_spec(body: dict, fields: dict[str, str]) -> dict | None:
    """The one constraint a request asks for (engine/sample/structured.py), from response_format (chat)
    or a guided_* / json_schema / grammar field; its grammar is compiled before it is queued."""
    specs = []
    response_format = expect(body, "response_format", dict, "an object")
    if response_format is not None:
        kind = response_format.get("type", "text")
        if kind == "json_object":
            specs.append({"kind": "json_object", "value": None, "param": "response_format"})
        elif kind == "json_schema":
            inner = response_format.get("json_schema")
            schema = inner.get("schema") if isinstance(inner, dict) else None
            if not isinstance(schema, dict):
                raise bad_request("response_format.json_schema.schema must be a JSON schema object", param="response_format")
            specs.append({"kind": "json_schema", "value": schema, "param": "response_format"})
        elif kind != "text":
            raise bad_request(
                f"response_format type must be text, json_object or json_schema, got {kind!r}", param="response_format"
            )
    given = [(name, kind, body[name]) for name, kind in fields.items() if name in body]
    outputs = expect(body, "structured_outputs", dict, "an object")
    for key, value in (outputs or {}).items():
        if key == "json_object" and value is True:
            specs.append({"kind": "json_object", "value": None, "param": "structured_outputs.json_object"})
        elif key in STRUCTURED_OUTPUTS_KEYS and value is not None:
            given.append((f"structured_outputs.{key}", STRUCTURED_OUTPUTS_KEYS[key], value))
        elif key != "json_object" and value is not None:
            raise bad_request(f"structured_outputs.{key} is not supported", param=f"structured_outputs.{key}")
    for name, kind, value in given:
        if kind == "json_schema":
            if isinstance(value, str):
                try:
                    value = json.loads(value)
                except ValueError:
                    raise bad_request(f"{name} must be a JSON schema (an object, or a string holding one)", param=name) from None
            if not isinstance(value, dict):
                raise bad_request(f"{name} must be a JSON schema object", param=name)
        elif kind == "choice":
            if not isinstance(value, list) or not value or not all(isinstance(c, str) and c for c in value):
                raise bad_request(f"{name} must be a non-empty list of non-empty strings", param=name)
        elif not isinstance(value, str) or not value:
            raise bad_request(f"{name} must be a non-empty string", param=name)
        specs.append({"kind": kind, "value": value, "param": name})
    if len(specs) > 1:
        raise bad_request(f"only one constraint per request, got {', '.join(s['param'] for s in specs)}", param=specs[1]["param"])
    return specs[0] if specs else None
