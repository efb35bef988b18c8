"""LangChain's OpenAI chat model against the live server on the real model, as applications use it:
`with_structured_output(method="json_schema")` hands back the pydantic object, and `bind_tools`
drives a whole round trip (the call, the tool's result sent back, the answer), whole and streamed.
Every reply is greedy (temperature 0), so what each turn says is the same on every run.

Nothing here reaches the network: ChatOpenAI only loads tiktoken's files to count tokens, which
these calls never do, and LangSmith tracing stays off unless its environment variables say so.
"""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import BaseModel, Field

pytestmark = [pytest.mark.live, pytest.mark.real_model]


class City(BaseModel):
    """A city, as a record."""

    name: str = Field(max_length=40)
    country: str = Field(max_length=40)
    population_millions: int = Field(ge=0, le=50)


def get_weather(city: str, unit: Literal["celsius", "fahrenheit"]) -> str:
    """The current weather in a city."""
    return f'{{"city": "{city}", "temperature": 18, "unit": "{unit}", "sky": "sunny"}}'


ASK = "What is the weather in Paris right now?"


@pytest.fixture(scope="module")
def chat_model(default_server, served_model):
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        model=served_model,
        base_url=f"{default_server.url}/v1",
        api_key="x",
        max_retries=0,
        timeout=120,
        temperature=0,
        max_tokens=120,
    )


def test_with_structured_output_json_schema_returns_the_pydantic_object(chat_model, default_server):
    structured = chat_model.with_structured_output(City, method="json_schema", include_raw=True)
    result = structured.invoke("Describe Paris as a city record.")
    assert result["parsing_error"] is None
    city = result["parsed"]
    assert isinstance(city, City) and city.name and city.country
    raw = result["raw"]  # what the server answered: the schema's JSON as the message content
    assert City.model_validate_json(raw.content) == city
    row = default_server.wait_row(raw.response_metadata["id"])
    assert row["status"] == "completed"


def test_bind_tools_round_trip(chat_model):
    from langchain_core.messages import HumanMessage
    from langchain_core.tools import tool

    weather = tool(get_weather)
    with_tools = chat_model.bind_tools([weather], tool_choice="get_weather")
    ask = HumanMessage(ASK)
    call_message = with_tools.invoke([ask])
    [call] = call_message.tool_calls
    assert call["name"] == "get_weather" and call["id"].startswith("call_")
    assert set(call["args"]) == {"city", "unit"} and call["args"]["unit"] in ("celsius", "fahrenheit")
    result = weather.invoke(call)  # a ToolMessage answering that call id
    assert result.tool_call_id == call["id"]

    # the answer (tool_choice auto, greedy): text that reads the tool's result, and no further call
    history = [ask, call_message, result]
    answer = chat_model.bind_tools([weather]).invoke(history)
    assert answer.tool_calls == [] and answer.response_metadata.get("finish_reason") == "stop", answer
    assert "sunny" in answer.content.lower(), answer.content  # only the tool's result says so

    # an agent that insists on another call over the same history gets one it can run
    again = chat_model.bind_tools([weather], tool_choice="any").invoke(history)
    assert again.tool_calls and again.response_metadata.get("finish_reason") == "tool_calls", again
    for later in again.tool_calls:
        assert later["name"] == "get_weather" and later["id"].startswith("call_") and later["id"] != call["id"]
        assert set(later["args"]) == {"city", "unit"} and later["args"]["unit"] in ("celsius", "fahrenheit")


def test_bind_tools_streamed_call_aggregates_into_tool_calls(chat_model):
    from langchain_core.tools import tool

    with_tools = chat_model.bind_tools([tool(get_weather)], tool_choice="any")  # "any" is OpenAI's "required"
    aggregate = None
    for chunk in with_tools.stream(ASK):
        aggregate = chunk if aggregate is None else aggregate + chunk
    assert aggregate is not None and aggregate.tool_calls
    first = aggregate.tool_calls[0]
    assert first["name"] == "get_weather" and first["args"]["unit"] in ("celsius", "fahrenheit")
    assert aggregate.response_metadata.get("finish_reason") == "tool_calls"
