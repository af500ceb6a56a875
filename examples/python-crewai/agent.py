"""A CrewAI crew stuck in a loop, stopped by loopwatch (tool and LLM hooks).

The LLM is a scripted BaseLLM subclass (ReAct text) that alternates fetch_url(url=A) and
fetch_url(url=B) forever: CrewAI answers an immediately repeated identical input itself,
so a stuck CrewAI agent shows up as loopwatch's `alternating_calls` pattern (default stop:
6 cycles = 12 calls; CrewAI's own guard stops at 5 identical calls, so run this against a
loopwatch with `[profiles.stop] alternating_calls = 3`, as the test does).
Env: OTEL_EXPORTER_OTLP_ENDPOINT, LOOPWATCH_ADMIN_URL. `--no-check`: signals only.
Prints one JSON line: {"stopped", "action", "tool_calls"}.
"""

import json
import os
import sys

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")

from crewai import Agent, Crew, Task  # noqa: E402
from crewai.llms.base_llm import BaseLLM  # noqa: E402
from crewai.tools import tool  # noqa: E402

import loopwatch  # noqa: E402
from loopwatch.integrations.crewai import LoopwatchCrewHooks  # noqa: E402

loopwatch.instrument(service_name="example-crewai", set_global=False)
guard = loopwatch.Guard(check="--no-check" not in sys.argv)
tool_calls = 0


class StuckLLM(BaseLLM):
    def call(self, messages, tools=None, callbacks=None, available_functions=None, from_task=None, from_agent=None, response_model=None):
        url = ["https://example.com/a", "https://example.com/b"][tool_calls % 2]
        return f'Thought: fetch it\nAction: fetch_url\nAction Input: {{"url": "{url}"}}'


@tool("fetch_url")
def fetch_url(url: str) -> str:
    """Fetches a URL."""
    global tool_calls
    tool_calls += 1
    return "Error: connection refused"


agent = Agent(role="fetcher", goal="fetch pages", backstory="fetches", llm=StuckLLM(model="stuck"), tools=[fetch_url], max_iter=30)
crew = Crew(agents=[agent], tasks=[Task(description="fetch the pages", expected_output="the pages", agent=agent)])
try:
    with LoopwatchCrewHooks(guard), guard.run("crew"):
        crew.kickoff()
    outcome = {"stopped": False, "action": None}
except loopwatch.LoopDetected as stop:
    outcome = {"stopped": True, "action": stop.action}
guard.close()
print(json.dumps({**outcome, "tool_calls": tool_calls}))
