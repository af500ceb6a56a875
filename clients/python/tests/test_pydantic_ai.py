"""pydantic-ai integration against the real pydantic-ai package (FunctionModel, no network)
and a real loopwatch."""

from __future__ import annotations

import asyncio

import pytest

from conftest import SIGNALS_ONLY_TOOL_SECONDS, need_module

need_module("pydantic_ai")

from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.capabilities import Instrumentation  # noqa: E402
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart, UserPromptPart  # noqa: E402
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402
from pydantic_ai.models.instrumented import InstrumentationSettings  # noqa: E402

import loopwatch  # noqa: E402
from loopwatch.integrations.pydantic_ai import LoopwatchCapability  # noqa: E402


def build_agent(guard, provider, *, obey_nudges=False, instrumented=True, limit=30):
    """An agent whose scripted model repeats fetch_url(url=A) until it has seen `limit` results
    (or, with `obey_nudges`, until loopwatch's nudge appears in the conversation)."""
    calls: list[str] = []
    seen_nudges: list[str] = []

    def script(messages, info: AgentInfo) -> ModelResponse:
        returns = sum(isinstance(p, ToolReturnPart) for m in messages for p in getattr(m, "parts", []))
        nudges = [
            p.content
            for m in messages
            for p in getattr(m, "parts", [])
            if isinstance(p, UserPromptPart) and isinstance(p.content, str) and p.content.startswith("[loopwatch]")
        ]
        seen_nudges[:] = nudges
        if (obey_nudges and nudges) or returns >= limit:
            return ModelResponse(parts=[TextPart("giving up on the fetch")])
        return ModelResponse(parts=[ToolCallPart("fetch_url", {"url": "https://example.com/a"}, tool_call_id=f"c{returns}")])

    capabilities = [LoopwatchCapability(guard)]
    if instrumented:
        capabilities.insert(0, Instrumentation(settings=InstrumentationSettings(tracer_provider=provider)))
    agent = Agent(FunctionModel(script, model_name="scripted-loop"), name="fetcher", capabilities=capabilities)

    @agent.tool_plain
    async def fetch_url(url: str) -> str:
        """Fetches a URL."""
        calls.append(url)
        await asyncio.sleep(SIGNALS_ONLY_TOOL_SECONDS)
        return "Error: connection refused"

    return agent, calls, seen_nudges


def test_kill_stops_the_agent(make_guard, inst):
    guard = make_guard()
    agent, calls, _ = build_agent(guard, inst.tracer_provider)
    with pytest.raises(loopwatch.LoopDetected) as info:
        asyncio.run(agent.run("fetch it"))
    assert info.value.action == "kill" and info.value.pattern == "repeated_result"
    assert 6 <= len(calls) <= 7, len(calls)


# loopwatch's default profiles on one call repeated with the same result: nudge warns at
# the 3rd (and its count starts again after a detection), stop kills at the 6th.
EXPECTED_DECISIONS = ["allow", "allow", "warn", "allow", "allow", "deny"]


def tool_decisions(spans, trace_id):
    return [
        (s.attributes.get("gen_ai.tool.name"), s.attributes.get(loopwatch.DECISION_ATTRIBUTE))
        for s in spans.get_finished_spans()
        if s.attributes.get("gen_ai.operation.name") == "execute_tool"
        and format(s.context.trace_id, "032x") == trace_id
    ]


def test_pre_check_blocks_the_sixth_call(make_guard, inst, spans):
    guard = make_guard(check=True)
    agent, calls, nudges = build_agent(guard, inst.tracer_provider)
    with pytest.raises(loopwatch.LoopDetected) as info:
        asyncio.run(agent.run("fetch it"))
    assert info.value.action == "deny" and info.value.tool_name == "fetch_url"
    assert len(calls) == 5
    assert nudges and "fetch_url" in nudges[0]
    # pydantic-ai's own execute_tool spans carry the decision; no second span per call
    decisions = tool_decisions(spans, info.value.trace_id)
    assert decisions == [("fetch_url", d) for d in EXPECTED_DECISIONS], decisions


def test_pre_check_without_pydantic_instrumentation_traces_calls_itself(make_guard, inst, spans):
    guard = make_guard(check=True)
    agent, calls, _ = build_agent(guard, inst.tracer_provider, instrumented=False)
    with pytest.raises(loopwatch.LoopDetected) as info:
        asyncio.run(agent.run("fetch it"))
    assert info.value.action == "deny"
    assert len(calls) == 5
    decisions = tool_decisions(spans, info.value.trace_id)
    assert [d for _, d in decisions] == EXPECTED_DECISIONS, decisions


def test_the_nudge_reaches_the_model_and_an_obedient_model_stops(make_guard, inst):
    guard = make_guard(check=True)
    agent, calls, nudges = build_agent(guard, inst.tracer_provider, obey_nudges=True)
    result = asyncio.run(agent.run("fetch it"))
    assert result.output == "giving up on the fetch"
    # the check before call 3 answered warn: the nudge came with call 3's result
    assert len(calls) == 3
    assert len(nudges) == 1 and "fetch_url" in nudges[0]
