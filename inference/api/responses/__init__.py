"""OpenAI's Responses API: /v1/responses, stored in the database, with previous_response_id and input items."""
