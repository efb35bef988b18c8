"""The OpenAI Agents SDK (`openai-agents`) as a real client: an agent with one function tool,
`get_weather(city)`, runs against a live Daphne serving the real Qwen2.5-Coder-0.5B-Instruct GGUF,
through both of the SDK's model classes (Responses and Chat Completions), streamed and not, with
`tool_choice` left to the model (auto) and forced (`ModelSettings(tool_choice="required")`).

Every run must call the tool with city "Paris", and the final answer must come from the tool's
result. What the 0.5B does, measured here: under auto it calls the tool in every run (it writes a
bare `{"name": ..., "arguments": ...}` object or the `<tool_call>` tag; a `{` opening the answer is
held to a valid call by the tool-call grammar, engine/sample/tool_trigger.py), so auto needs no
`required`. Once it has the result, though, a tool still on offer is called again, turn after turn
(the SDK's `reset_tool_choice` puts tool_choice back to auto, which changes nothing here), until
max_turns. So the tool disables itself once used, through the SDK's own `is_enabled`: the next turn
is sent without tools, and the model then answers from the result ("The weather in Paris is sunny
with a temperature of 22°C.").
"""

from __future__ import annotations

import pytest
from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

pytestmark = [pytest.mark.live, pytest.mark.real_model]
set_tracing_disabled(True)  # the SDK would otherwise send its traces to OpenAI
INSTRUCTIONS = "You answer questions about the weather. Use the tools."
QUESTION = "What is the weather in Paris?"


def weather_agent(model, tool_choice: str | None, calls: list[str]) -> Agent:
    @function_tool(is_enabled=lambda context, agent: not calls)  # offered until it has been called once
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        calls.append(city)
        return f"Sunny, 22 C in {city}"

    settings = ModelSettings(tool_choice=tool_choice, temperature=0, max_tokens=80)
    return Agent(name="weather", instructions=INSTRUCTIONS, tools=[get_weather], model=model, model_settings=settings)


# auto through both model classes, streamed and not; required once per class (streamed once)
RUNS = [
    pytest.param(model_class, streamed, None, id=f"{name}-{'run_streamed' if streamed else 'run'}-auto")
    for name, model_class in (("responses", OpenAIResponsesModel), ("chat", OpenAIChatCompletionsModel))
    for streamed in (False, True)
] + [
    pytest.param(OpenAIResponsesModel, False, "required", id="responses-run-required"),
    pytest.param(OpenAIChatCompletionsModel, True, "required", id="chat-run_streamed-required"),
]


@pytest.mark.parametrize("model_class, streamed, tool_choice", RUNS)
async def test_the_agent_calls_the_tool_and_answers_from_its_result(qwen_server, qwen_model, model_class, streamed, tool_choice):
    client = AsyncOpenAI(base_url=f"{qwen_server.url}/v1", api_key="x", max_retries=0, timeout=120)
    calls: list[str] = []
    agent = weather_agent(model_class(model=qwen_model, openai_client=client), tool_choice, calls)
    if streamed:
        result = Runner.run_streamed(agent, QUESTION, max_turns=3)
        kinds = {event.type async for event in result.stream_events()}
        assert "raw_response_event" in kinds and "run_item_stream_event" in kinds
    else:
        result = await Runner.run(agent, QUESTION, max_turns=3)
    assert calls == ["Paris"]
    answer = result.final_output.lower()
    assert "sunny" in answer and "22" in answer, result.final_output
    await client.close()


async def test_an_agent_with_two_tools_calls_one_then_the_other(qwen_server, qwen_model):
    """Two tools on one agent: `find_city(landmark)`, then `get_weather(city)` with what the first
    returned, then the answer. Each tool is offered while it is the next step (the SDK's `is_enabled`:
    the 0.5B, offered both at once, asks for the weather at the landmark itself), through the
    Responses model class under auto. The run ends there: after two tool turns the 0.5B's greedy
    answer is an immediate end of turn (an empty final output; the rendered prompt is the template's
    own, tool turns included), so this test holds the calls, and the one-tool test the answer."""
    client = AsyncOpenAI(base_url=f"{qwen_server.url}/v1", api_key="x", max_retries=0, timeout=120)
    found: list[str] = []
    weather: list[str] = []

    @function_tool(is_enabled=lambda context, agent: not found)
    def find_city(landmark: str) -> str:
        """The city a landmark is in."""
        found.append(landmark)
        return "Paris"

    @function_tool(is_enabled=lambda context, agent: bool(found) and not weather)
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        weather.append(city)
        return f"Sunny, 22 C in {city}"

    agent = Agent(
        name="travel",
        instructions="You answer questions about the weather at landmarks. Use the tools.",
        tools=[find_city, get_weather],
        model=OpenAIResponsesModel(model=qwen_model, openai_client=client),
        model_settings=ModelSettings(temperature=0, max_tokens=80),
    )
    result = await Runner.run(agent, "What is the weather at the Eiffel Tower?", max_turns=4)
    assert "eiffel" in found[0].lower() and weather == ["Paris"]
    called = [item.raw_item.name for item in result.new_items if item.type == "tool_call_item"]
    assert called == ["find_city", "get_weather"] and isinstance(result.final_output, str)
    await client.close()
