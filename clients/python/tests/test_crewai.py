"""CrewAI integration against the real `crewai` package (a scripted `BaseLLM` subclass,
no network) and a real loopwatch. Runs in its own venv (CrewAI pins pydantic and openai
versions the other frameworks cannot share): `run-tests.sh` does that.

CrewAI answers an immediately repeated identical tool input itself ("I tried reusing the
same input") and stops a run at 5 identical (tool, arguments, result) calls. So the
scripted model here alternates between two URLs (A, B, A, B, ...), loopwatch's
`alternating_calls` pattern, with a loopwatch whose profiles fire at 2 cycles (nudge) and
3 cycles (stop): the stop comes at call 6, before CrewAI's own guard at call 9.
"""

from __future__ import annotations

import os
import time

import pytest

from conftest import SIGNALS_ONLY_TOOL_SECONDS, _server, need_module

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")
os.environ.setdefault("OTEL_SDK_DISABLED", "false")
need_module("crewai")

from crewai import Agent, Crew, Task  # noqa: E402
from crewai.llms.base_llm import BaseLLM  # noqa: E402
from crewai.tools import tool  # noqa: E402

import loopwatch  # noqa: E402
from loopwatch.integrations.crewai import LoopwatchCrewHooks  # noqa: E402

ALTERNATING_CONFIG = """
[profiles.nudge]
alternating_calls = 2
[profiles.stop]
alternating_calls = 3
"""

URLS = ["https://example.com/a", "https://example.com/b"]


@pytest.fixture(scope="module")
def lw_alt():
    yield from _server(ALTERNATING_CONFIG)


@pytest.fixture(scope="module")
def crew_inst(lw_alt):
    inst = loopwatch.instrument(lw_alt.grpc_endpoint, "loopwatch-crewai-tests", set_global=False)
    yield inst
    inst.shutdown()


@pytest.fixture
def crew_guard(lw_alt, crew_inst):
    guards = []

    def build(**kwargs):
        guard = loopwatch.Guard(endpoint=lw_alt.grpc_endpoint, admin_url=lw_alt.admin_url, tracer_provider=crew_inst.tracer_provider, **kwargs)
        guards.append(guard)
        return guard

    yield build
    for guard in guards:
        guard.close()


class AlternatingLLM(BaseLLM):
    """Scripted ReAct model: fetches URL A, then B, then A... ; with `obey_nudges`, gives a
    final answer once a loopwatch nudge is in its messages."""

    obey_nudges: bool = False
    seen_nudges: list = []
    turns: int = 0

    def call(self, messages, tools=None, callbacks=None, available_functions=None, from_task=None, from_agent=None, response_model=None):
        texts = [m.get("content", "") for m in messages] if isinstance(messages, list) else [messages]
        self.seen_nudges[:] = [t for t in texts if isinstance(t, str) and t.startswith("[loopwatch]")]
        if self.obey_nudges and self.seen_nudges:
            return "Thought: loopwatch says I am looping\nFinal Answer: giving up on the fetch"
        url = URLS[self.turns % 2]
        self.turns += 1
        return f'Thought: I must fetch it\nAction: fetch_url\nAction Input: {{"url": "{url}"}}'


def build(obey_nudges=False):
    calls: list[str] = []

    @tool("fetch_url")
    def fetch_url(url: str) -> str:
        """Fetches a URL."""
        calls.append(url)
        time.sleep(SIGNALS_ONLY_TOOL_SECONDS)
        return "Error: connection refused"

    llm = AlternatingLLM(model="scripted-alternating", obey_nudges=obey_nudges, seen_nudges=[])
    agent = Agent(role="fetcher", goal="fetch pages", backstory="fetches", llm=llm, tools=[fetch_url], max_iter=30, verbose=False)
    task = Task(description="fetch the pages", expected_output="the pages", agent=agent)
    return Crew(agents=[agent], tasks=[task], verbose=False), calls, llm


def test_kill_stops_the_crew(crew_guard):
    guard = crew_guard()
    crew, calls, _ = build()
    with pytest.raises(loopwatch.LoopDetected) as info:
        with LoopwatchCrewHooks(guard), guard.run("crew"):
            crew.kickoff()
    assert info.value.action == "kill" and info.value.pattern == "alternating_calls"
    assert 6 <= len(calls) <= 7, calls


def test_pre_check_blocks_the_sixth_call(crew_guard):
    guard = crew_guard(check=True)
    crew, calls, llm = build()
    with pytest.raises(loopwatch.LoopDetected) as info:
        with LoopwatchCrewHooks(guard), guard.run("crew"):
            crew.kickoff()
    assert info.value.action == "deny" and info.value.tool_name == "fetch_url"
    assert len(calls) == 5, calls
    assert llm.seen_nudges and "fetch_url" in llm.seen_nudges[0]


def test_the_nudge_reaches_the_model(crew_guard):
    guard = crew_guard(check=True)
    crew, calls, llm = build(obey_nudges=True)
    with LoopwatchCrewHooks(guard), guard.run("crew"):
        result = crew.kickoff()
    assert "giving up on the fetch" in str(result)
    assert len(calls) == 4, calls


def test_crewai_example(lw_alt):
    from test_examples import run_example

    outcome = run_example("python-crewai", lw_alt)
    assert outcome["stopped"] is True and outcome["action"] == "deny", outcome
    assert outcome["tool_calls"] == 5, outcome
