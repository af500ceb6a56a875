"""smolagents integration against the real `smolagents` package (ToolCallingAgent with a
scripted `Model` subclass, no network) and a real loopwatch."""

from __future__ import annotations

import pytest

from conftest import need_module

need_module("smolagents")

from smolagents import ToolCallingAgent, tool  # noqa: E402
from smolagents.models import ChatMessage, ChatMessageToolCall, ChatMessageToolCallFunction, MessageRole, Model  # noqa: E402

import loopwatch  # noqa: E402
from loopwatch.integrations.smolagents import guard_agent  # noqa: E402


class LoopingModel(Model):
    """Calls fetch_url(url=A) at every step; with `obey_nudges`, answers once a loopwatch
    nudge is in what it reads."""

    def __init__(self, obey_nudges: bool = False) -> None:
        super().__init__(model_id="looping-script")
        self.obey_nudges = obey_nudges
        self.seen_nudges: list[str] = []
        self.steps = 0

    def generate(self, messages, stop_sequences=None, response_format=None, tools_to_call_from=None, **kwargs):
        self.steps += 1
        text = "\n".join(
            part.get("text", "") if isinstance(part, dict) else str(part)
            for m in messages
            for part in (m.content if isinstance(m.content, list) else [m.content or ""])
        )
        self.seen_nudges = [line for line in text.splitlines() if "[loopwatch]" in line]
        if self.obey_nudges and self.seen_nudges:
            name, arguments = "final_answer", {"answer": "giving up on the fetch"}
        else:
            name, arguments = "fetch_url", {"url": "https://example.com/a"}
        call = ChatMessageToolCall(
            id=f"call_{self.steps}", type="function", function=ChatMessageToolCallFunction(name=name, arguments=arguments)
        )
        return ChatMessage(role=MessageRole.ASSISTANT, content="", tool_calls=[call])


def build(guard, obey_nudges=False):
    calls: list[str] = []

    @tool
    def fetch_url(url: str) -> str:
        """Fetches a URL.

        Args:
            url: the URL to fetch.
        """
        calls.append(url)
        return "Error: connection refused"

    model = LoopingModel(obey_nudges)
    agent = guard_agent(guard, ToolCallingAgent(tools=[fetch_url], model=model, max_steps=30, verbosity_level=0))
    return agent, calls, model


def test_kill_stops_the_agent(make_guard):
    guard = make_guard()
    agent, calls, _ = build(guard)
    with pytest.raises(loopwatch.LoopDetected) as info:
        with guard.run("fetcher"):
            agent.run("fetch it")
    assert info.value.action == "kill"
    assert 6 <= len(calls) <= 7, len(calls)


def test_pre_check_blocks_the_sixth_call(make_guard):
    guard = make_guard(check=True)
    agent, calls, model = build(guard)
    with pytest.raises(loopwatch.LoopDetected) as info:
        with guard.run("fetcher"):
            agent.run("fetch it")
    assert info.value.action == "deny" and info.value.tool_name == "fetch_url"
    assert len(calls) == 5
    assert model.seen_nudges and "fetch_url" in model.seen_nudges[0]


def test_the_nudge_reaches_the_model(make_guard):
    guard = make_guard(check=True)
    agent, calls, model = build(guard, obey_nudges=True)
    with guard.run("fetcher"):
        answer = agent.run("fetch it")
    assert answer == "giving up on the fetch"
    assert len(calls) == 3
