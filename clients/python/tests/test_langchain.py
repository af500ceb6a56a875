"""LangChain v1 / LangGraph integration against the real `langchain` and `langgraph`
packages (`create_agent`, a scripted `BaseChatModel` subclass, no network) and a real loopwatch;
and LangGraph's `interrupt` as the approval hook (`loopwatch.integrations.langgraph`)."""

from __future__ import annotations

import asyncio
import re
import time
import urllib.request
from typing import Any

import pytest

from conftest import SIGNALS_ONLY_TOOL_SECONDS, need_module

need_module("langchain.agents")

from langchain.agents import create_agent  # noqa: E402
from langchain_core.language_models.chat_models import BaseChatModel  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.types import Command  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

import loopwatch  # noqa: E402
from loopwatch.integrations.langchain import LoopwatchMiddleware  # noqa: E402
from loopwatch.integrations.langgraph import interrupt_for_approval  # noqa: E402


class LoopingChatModel(BaseChatModel):
    """A scripted chat model: calls fetch_url(url=A) again after every tool result; with
    `obey_nudges`, answers in text once a loopwatch nudge is in the conversation."""

    obey_nudges: bool = False
    seen_nudges: list = []
    #: answer in text once this many tool results are in the conversation (0: never)
    stop_after: int = 0

    @property
    def _llm_type(self) -> str:
        return "looping-script"

    def bind_tools(self, tools: Any, **kwargs: Any) -> "LoopingChatModel":
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        results = sum(isinstance(m, ToolMessage) for m in messages)
        nudges = [m.content for m in messages if isinstance(m, HumanMessage) and str(m.content).startswith("[loopwatch]")]
        self.seen_nudges[:] = nudges
        if (self.obey_nudges and nudges) or (self.stop_after and results >= self.stop_after):
            message = AIMessage(content="giving up on the fetch")
        else:
            message = AIMessage(
                content="",
                tool_calls=[{"name": "fetch_url", "args": {"url": "https://example.com/a"}, "id": f"call_{results}", "type": "tool_call"}],
            )
        return ChatResult(generations=[ChatGeneration(message=message)])


def build(guard, obey_nudges=False, stop_after=0, checkpointer=None):
    calls: list[str] = []

    @tool
    def fetch_url(url: str) -> str:
        """Fetches a URL."""
        calls.append(url)
        time.sleep(SIGNALS_ONLY_TOOL_SECONDS)
        return "Error: connection refused"

    model = LoopingChatModel(obey_nudges=obey_nudges, seen_nudges=[], stop_after=stop_after)
    agent = create_agent(model, [fetch_url], middleware=[LoopwatchMiddleware(guard)], checkpointer=checkpointer)
    return agent, calls, model


def test_kill_stops_a_sync_agent(make_guard):
    guard = make_guard()
    agent, calls, _ = build(guard)
    with pytest.raises(loopwatch.LoopDetected) as info:
        with guard.run("fetcher"):
            agent.invoke({"messages": [HumanMessage("fetch it")]}, {"recursion_limit": 100})
    assert info.value.action == "kill"
    assert 6 <= len(calls) <= 7, len(calls)


def test_pre_check_blocks_the_sixth_call_async(make_guard):
    guard = make_guard(check=True)
    agent, calls, model = build(guard)

    async def main():
        async with guard.run("fetcher"):
            await agent.ainvoke({"messages": [HumanMessage("fetch it")]}, {"recursion_limit": 100})

    with pytest.raises(loopwatch.LoopDetected) as info:
        asyncio.run(main())
    assert info.value.action == "deny" and info.value.tool_name == "fetch_url"
    assert len(calls) == 5
    assert model.seen_nudges and "fetch_url" in model.seen_nudges[0]


def test_the_nudge_stays_in_the_history_and_an_obedient_model_stops(make_guard):
    guard = make_guard(check=True)
    agent, calls, model = build(guard, obey_nudges=True)
    with guard.run("fetcher"):
        state = agent.invoke({"messages": [HumanMessage("fetch it")]}, {"recursion_limit": 100})
    assert state["messages"][-1].content == "giving up on the fetch"
    assert len(calls) == 3
    assert sum(isinstance(m, HumanMessage) and m.content.startswith("[loopwatch]") for m in state["messages"]) == 1


# --- LangGraph's interrupt as the approval hook (loopwatch's `stop` profile: require_approval)


@pytest.fixture
def interrupt_guard(lw_approval):
    """A guard on `lw_approval` whose approval hook is LangGraph's `interrupt`; `.spans`
    holds the finished spans (in-memory exporter of the real SDK)."""
    inst = loopwatch.instrument(lw_approval.grpc_endpoint, "loopwatch-langgraph-tests", set_global=False)
    spans = InMemorySpanExporter()
    inst.tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    guards = []

    def make(**kwargs):
        guard = loopwatch.Guard(
            endpoint=lw_approval.grpc_endpoint,
            admin_url=lw_approval.admin_url,
            tracer_provider=inst.tracer_provider,
            on_approval=interrupt_for_approval,
            **kwargs,
        )
        guard.spans = spans
        guards.append(guard)
        return guard

    yield make
    for guard in guards:
        guard.close()
    inst.shutdown()


def approvals_counted(server, decision):
    """loopwatch's `loopwatch_approvals_total{decision}` (0 before the first)."""
    with urllib.request.urlopen(server.admin_url + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    found = re.search(r'^loopwatch_approvals_total\{decision="%s"\} (\d+)' % decision, text, re.M)
    return int(found.group(1)) if found else 0


def approval_decisions(exporter):
    return [
        event.attributes["loopwatch.approval.decision"]
        for span in exporter.get_finished_spans()
        for event in span.events
        if event.name == "loopwatch.approval"
    ]


def test_interrupt_pauses_a_checked_call_and_an_approval_resumes_the_graph(interrupt_guard, lw_approval):
    guard = interrupt_guard(check=True)
    agent, calls, _ = build(guard, stop_after=8, checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "approve"}, "recursion_limit": 100}
    approved_before = approvals_counted(lw_approval, "approve")
    with guard.run("fetcher") as run:
        state = agent.invoke({"messages": [HumanMessage("fetch it")]}, config)
        # paused before the 6th call ran: the graph is checkpointed, invoke returned
        assert len(calls) == 5
        (paused,) = state["__interrupt__"]
        request = paused.value
        assert request["kind"] == "loopwatch.approval" and request["run_key"] == run.run_key
        assert request["tool_name"] == "fetch_url" and request["arguments"] == {"url": "https://example.com/a"}
        assert request["pattern"] == "repeated_result" and request["profile"] == "stop"
        assert agent.get_state(config).next  # the thread waits to be resumed
        assert approvals_counted(lw_approval, "approve") == approved_before

        state = agent.invoke(Command(resume=True), config)
    assert "__interrupt__" not in state
    assert state["messages"][-1].content == "giving up on the fetch"
    assert len(calls) == 8  # the approved call ran, and the run went on
    assert approvals_counted(lw_approval, "approve") == approved_before + 1
    assert approval_decisions(guard.spans) == ["approve"]
    # the paused attempt sent no span: loopwatch saw 8 calls, one per call that ran
    tool_spans = [s for s in guard.spans.get_finished_spans() if s.name == "execute_tool fetch_url"]
    assert len(tool_spans) == 8


def test_interrupt_pauses_on_a_signal_and_a_denial_stops_the_graph(interrupt_guard, lw_approval):
    guard = interrupt_guard()  # no pre-check: the require_approval signal pauses before_model
    agent, calls, _ = build(guard, checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "deny"}, "recursion_limit": 100}
    with pytest.raises(loopwatch.LoopDetected) as info:
        with guard.run("fetcher") as run:
            state = agent.invoke({"messages": [HumanMessage("fetch it")]}, config)
            (paused,) = state["__interrupt__"]
            assert paused.value["signal_id"] and paused.value["tool_name"] is None
            made = len(calls)
            assert 6 <= made <= 7, made
            agent.invoke(Command(resume=False), config)
    assert info.value.action == "approval_denied"
    assert len(calls) == made  # nothing ran after the denial
    assert approval_decisions(guard.spans) == ["deny"]
    # the denial was posted: loopwatch published a kill for the run
    actions = [s["action"] for s in lw_approval.get(f"/v1/signals?trace_id={run.trace_id}")["data"]]
    assert "require_approval" in actions and "kill" in actions, actions


def test_interrupt_resumes_an_async_graph(interrupt_guard):
    guard = interrupt_guard(check=True)
    agent, calls, _ = build(guard, stop_after=7, checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "async"}, "recursion_limit": 100}

    async def main():
        async with guard.run("fetcher"):
            state = await agent.ainvoke({"messages": [HumanMessage("fetch it")]}, config)
            assert len(calls) == 5 and state["__interrupt__"]
            return await agent.ainvoke(Command(resume="approve"), config)

    state = asyncio.run(main())
    assert state["messages"][-1].content == "giving up on the fetch" and len(calls) == 7
