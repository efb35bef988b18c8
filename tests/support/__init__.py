"""Helpers the test packages share, each defined once: one concept per module.

network: a free local port for a server the tests start.
asgi: requests into the site's ASGI application in this process.
servers: what a live server's /stats says about its state.
engines: the in-process engine fixture (a pytest plugin, registered by tests/conftest.py).
json_prefix: whether a reply cut by max_tokens is still the start of a JSON text.
official_templates: official chat templates as text fixtures (chat_templates/), on a tokenizer.
grammar_checks: a tool-call grammar matched against text, a reply replayed through the trigger.
tool_conversation: a conversation with tools as a client sends it, and as transformers takes it.
"""
