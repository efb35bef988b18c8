"""The OpenAI Agents SDK (`openai-agents`) as a real client: an agent with one function tool,
`get_weather(city)`, runs against a live Daphne serving the real Qwen2.5-Coder-0.5B-Instruct GGUF,
through both of the SDK's model classes (Responses and Chat Completions), streamed and not, with
`tool_choice` left to the model (auto) and forced (`ModelSettings(tool_choice="required")`).

Every run must call the tool with city "Paris". What the 0.5B does, measured here: under auto it
calls the tool in every run (a bare `{"name": ..., "arguments": ...}` object or the `<tool_call>`
tag; the tool-call grammar holds a `{` that is a call to a valid one, engine/sample/tool_trigger.py).
Once it has the result, a tool still on offer is called again, turn after turn, with the same
arguments, though its history is exactly what Qwen's template writes (`<tool_call>` blocks, the
results in `<tool_response>` blocks of a user turn): with the tool left on, the run ends through
the SDK's own `max_turns` error handler, which the tool-left-on test uses. Where the tool disables
itself once used (the SDK's `is_enabled`), the next turn is sent without tools and the model
answers from the result ("The weather in Paris is sunny with a temperature of 22°C.").
"""

from __future__ import annotations

import pytest
from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    StopAtTools,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

from tests.support.engine_fixtures import async_wait_until

pytestmark = [pytest.mark.live, pytest.mark.real_model]
set_tracing_disabled(True)  # the SDK would otherwise send its traces to OpenAI
INSTRUCTIONS = "You answer questions about the weather. Use the tools."
QUESTION = "What is the weather in Paris?"


def weather_agent(model, tool_choice: str | None, calls: list[str], *, left_on: bool = False) -> Agent:
    @function_tool(is_enabled=lambda context, agent: left_on or not calls)  # offered until called once, or always
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


# Qwen's template's own writing of the call and of its result, as the next turn's prompt must hold them
CALL_AS_TEMPLATE = (
    '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>'
)
RESULT_AS_TEMPLATE = "<|im_start|>user\n<tool_response>\nSunny, 22 C in Paris\n</tool_response><|im_end|>"


@pytest.mark.parametrize("model_class", [OpenAIResponsesModel, OpenAIChatCompletionsModel], ids=["responses", "chat"])
async def test_a_tool_left_on_is_called_right_every_turn_with_the_templates_history(qwen_server, qwen_model, model_class):
    """The tool stays offered: every call names Paris, each later turn's prompt holds the earlier
    calls and results exactly as Qwen's template writes them, and the run ends without an error
    (the SDK's max_turns handler ends it with the tool's last result, as an app would)."""
    client = AsyncOpenAI(base_url=f"{qwen_server.url}/v1", api_key="x", max_retries=0, timeout=120)
    calls: list[str] = []
    agent = weather_agent(model_class(model=qwen_model, openai_client=client), None, calls, left_on=True)
    ended = {"max_turns": lambda data: {"final_output": f"stopped after {len(calls)} calls"}}
    result = await Runner.run(agent, QUESTION, max_turns=3, error_handlers=ended)
    assert len(calls) >= 2 and set(calls) == {"Paris"}, calls
    assert isinstance(result.final_output, str)
    held = len(calls) - 1  # the last turn's prompt holds every call before it, with its result
    # a row is written just after its reply's last event
    await async_wait_until(lambda: any(p.count(CALL_AS_TEMPLATE) == held for p in _prompts(qwen_server)))
    [last] = [p for p in _prompts(qwen_server) if p.count(CALL_AS_TEMPLATE) == held][-1:]
    assert last.count(RESULT_AS_TEMPLATE) == held and last.index(CALL_AS_TEMPLATE) < last.index(RESULT_AS_TEMPLATE)
    await client.close()


def _prompts(server) -> list[str]:
    return [row["prompt"] for row in server.rows("prompt LIKE ?", (f"%{QUESTION}%",))]


async def test_an_agent_with_two_tools_calls_one_then_the_other(qwen_server, qwen_model):
    """Two tools on one agent: `find_city(landmark)`, then `get_weather(city)` with what the first
    returned. Each tool is offered while it is the next step (the SDK's `is_enabled`: the 0.5B,
    offered both at once, asks for the weather at the landmark itself), through the Responses
    model class with tool_choice required kept for both turns (under auto, offered get_weather
    alone, it writes find_city's call again: JSON naming a function not offered, which stays
    content); the run stops at get_weather's result (the SDK's StopAtTools). This test holds the
    calls, the one-tool test the answer."""
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
        model_settings=ModelSettings(tool_choice="required", temperature=0, max_tokens=80),
        reset_tool_choice=False,
        tool_use_behavior=StopAtTools(stop_at_tool_names=["get_weather"]),
    )
    result = await Runner.run(agent, "What is the weather at the Eiffel Tower?", max_turns=4)
    assert "eiffel" in found[0].lower() and weather == ["Paris"]
    called = [item.raw_item.name for item in result.new_items if item.type == "tool_call_item"]
    assert called == ["find_city", "get_weather"] and isinstance(result.final_output, str)
    await client.close()
