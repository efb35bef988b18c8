"""OpenAI's API: /v1/completions, /v1/chat/completions, /v1/models and /v1/embeddings (request parsing, response and stream formats, views)."""
