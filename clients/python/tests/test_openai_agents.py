"""OpenAI Agents SDK integration against the real `openai-agents` package (its own
`agents.testing.ScriptedModel`, no network) and a real loopwatch."""

from __future__ import annotations

import asyncio
import json

import pytest

from conftest import SIGNALS_ONLY_TOOL_SECONDS, need_module

need_module("agents")

from agents import Agent, Runner, function_tool  # noqa: E402
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call  # noqa: E402

import loopwatch  # noqa: E402
from loopwatch.integrations.openai_agents import LoopwatchHooks  # noqa: E402

EXPECTED_DECISIONS = ["allow", "allow", "warn", "allow", "allow", "deny"]


def build(obey_nudges: bool = False, limit: int = 30):
    calls: list[str] = []
    nudges: list[str] = []

    @function_tool
    async def fetch_url(url: str) -> str:
        """Fetches a URL."""
        calls.append(url)
        await asyncio.sleep(SIGNALS_ONLY_TOOL_SECONDS)
        return "Error: connection refused"

    def respond(call):  # the scripted model: the same call again, unless nudged
        seen = [
            item["content"]
            for item in call.input
            if isinstance(item, dict) and item.get("role") == "user"
            and isinstance(item.get("content"), str) and item["content"].startswith("[loopwatch]")
        ]
        nudges.extend(seen)  # the filter adds a nudge to one model call; history keeps none
        if obey_nudges and seen:
            return [assistant_message("giving up on the fetch")]
        return [function_call("fetch_url", {"url": "https://example.com/a"}, call_id=f"call_{len(calls)}")]

    model = ScriptedModel([ModelStep(responder=respond) for _ in range(limit)])
    agent = Agent(name="fetcher", instructions="Fetch pages.", model=model, tools=[fetch_url])
    return agent, calls, nudges


async def run_agent(guard, agent, hooks):
    async with guard.run("fetcher") as run:
        await Runner.run(agent, "fetch it", hooks=hooks, run_config=hooks.run_config(tracing_disabled=True), max_turns=40)
    return run


def test_kill_stops_the_runner(make_guard):
    guard = make_guard()
    agent, calls, _ = build()
    with pytest.raises(loopwatch.LoopDetected) as info:
        asyncio.run(run_agent(guard, agent, LoopwatchHooks(guard)))
    assert info.value.action == "kill" and info.value.pattern == "repeated_result"
    assert 6 <= len(calls) <= 7, len(calls)


def test_pre_check_blocks_the_sixth_call(make_guard, spans):
    guard = make_guard(check=True)
    agent, calls, nudges = build()
    with pytest.raises(loopwatch.LoopDetected) as info:
        asyncio.run(run_agent(guard, agent, LoopwatchHooks(guard)))
    assert info.value.action == "deny" and info.value.tool_name == "fetch_url"
    assert len(calls) == 5
    assert nudges and "fetch_url" in nudges[0]
    tool_spans = [
        s for s in spans.get_finished_spans()
        if s.attributes.get("gen_ai.operation.name") == "execute_tool"
        and format(s.context.trace_id, "032x") == info.value.trace_id
    ]
    assert [s.attributes[loopwatch.DECISION_ATTRIBUTE] for s in tool_spans] == EXPECTED_DECISIONS
    assert json.loads(tool_spans[0].attributes["gen_ai.tool.call.arguments"]) == {"url": "https://example.com/a"}
    assert tool_spans[0].attributes["gen_ai.tool.call.result"] == "Error: connection refused"


def test_the_nudge_reaches_the_model(make_guard):
    guard = make_guard(check=True)
    agent, calls, nudges = build(obey_nudges=True)

    async def main():
        async with guard.run("fetcher"):
            hooks = LoopwatchHooks(guard)
            return await Runner.run(agent, "fetch it", hooks=hooks, run_config=hooks.run_config(tracing_disabled=True))

    result = asyncio.run(main())
    assert result.final_output == "giving up on the fetch"
    assert len(calls) == 3 and len(nudges) == 1
