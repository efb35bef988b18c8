"""The prefix scanner that structured-output tests judge cut replies by: every prefix of a JSON
document is accepted, and a text goes wrong exactly where no continuation could mend it."""

from __future__ import annotations

import json

import pytest

from .json_prefix import is_json_prefix

DOCUMENTS = [
    '{"name": "Ava", "tags": ["a", "b\\n\\"c\\u00e9"], "n": -12.5e+3, "ok": true, "none": null, "z": 0}',
    '[1, 0.5, -0, 2E-7, false, {}, [], {"a": [{}]}]',
    '  {"nested": {"deeper": {"deepest": [[[]]]}}}  ',
    '"just a string"',
    "12",
]


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_prefix_of_a_document_is_a_prefix(document):
    json.loads(document)  # the cases are JSON themselves
    assert all(is_json_prefix(document[:end]) for end in range(len(document) + 1))


@pytest.mark.parametrize(
    "text",
    [
        '{"a":1}}',  # text after the value ends
        '{"a":1} x',
        '{"a" 1',  # no colon
        "{,",
        '{"a":1,}',  # trailing comma
        "[1,]",
        '{"a": 01',  # a leading zero
        '{"a": 1.e',
        '{"a": -x',
        '{"a": tru3',
        '{"a": "x\\q',  # an unknown escape
        '{"a": "\\u12g',
        '{"a": "line\nbreak',  # a raw control character in a string
        '{"a": [1}',  # the wrong closing bracket
        "{'a': 1",
        "}",
    ],
)
def test_a_text_no_continuation_completes_is_not_a_prefix(text):
    assert not is_json_prefix(text)
