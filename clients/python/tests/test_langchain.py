"""LangChain v1 / LangGraph integration against the real `langchain` and `langgraph`
packages (`create_agent`, a scripted `BaseChatModel` subclass, no network) and a real loopwatch."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from conftest import need_module

need_module("langchain.agents")

from langchain.agents import create_agent  # noqa: E402
from langchain_core.language_models.chat_models import BaseChatModel  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langchain_core.tools import tool  # noqa: E402

import loopwatch  # noqa: E402
from loopwatch.integrations.langchain import LoopwatchMiddleware  # noqa: E402


class LoopingChatModel(BaseChatModel):
    """A scripted chat model: calls fetch_url(url=A) again after every tool result; with
    `obey_nudges`, answers in text once a loopwatch nudge is in the conversation."""

    obey_nudges: bool = False
    seen_nudges: list = []

    @property
    def _llm_type(self) -> str:
        return "looping-script"

    def bind_tools(self, tools: Any, **kwargs: Any) -> "LoopingChatModel":
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        results = sum(isinstance(m, ToolMessage) for m in messages)
        nudges = [m.content for m in messages if isinstance(m, HumanMessage) and str(m.content).startswith("[loopwatch]")]
        self.seen_nudges[:] = nudges
        if self.obey_nudges and nudges:
            message = AIMessage(content="giving up on the fetch")
        else:
            message = AIMessage(
                content="",
                tool_calls=[{"name": "fetch_url", "args": {"url": "https://example.com/a"}, "id": f"call_{results}", "type": "tool_call"}],
            )
        return ChatResult(generations=[ChatGeneration(message=message)])


def build(guard, obey_nudges=False):
    calls: list[str] = []

    @tool
    def fetch_url(url: str) -> str:
        """Fetches a URL."""
        calls.append(url)
        return "Error: connection refused"

    model = LoopingChatModel(obey_nudges=obey_nudges, seen_nudges=[])
    agent = create_agent(model, [fetch_url], middleware=[LoopwatchMiddleware(guard)])
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
