"""An OpenAI Agents SDK agent stuck in a loop, stopped by loopwatch (run hooks).

The model is the SDK's own agents.testing.ScriptedModel, calling fetch_url(url=A) forever.
Env: OTEL_EXPORTER_OTLP_ENDPOINT, LOOPWATCH_ADMIN_URL. `--no-check`: signals only.
Prints one JSON line: {"stopped", "action", "tool_calls"}.
"""

import asyncio
import json
import sys

from agents import Agent, Runner, function_tool
from agents.testing import ModelStep, ScriptedModel, function_call

import loopwatch
from loopwatch.integrations.openai_agents import LoopwatchHooks

loopwatch.instrument(service_name="example-openai-agents")
guard = loopwatch.Guard(check="--no-check" not in sys.argv)
tool_calls = 0


@function_tool
async def fetch_url(url: str) -> str:
    """Fetches a URL."""
    global tool_calls
    tool_calls += 1
    return "Error: connection refused"


model = ScriptedModel(
    [ModelStep(responder=lambda call: [function_call("fetch_url", {"url": "https://example.com/a"}, call_id=f"c{tool_calls}")]) for _ in range(30)]
)
agent = Agent(name="fetcher", instructions="Fetch pages.", model=model, tools=[fetch_url])


async def main():
    hooks = LoopwatchHooks(guard)
    async with guard.run("fetcher"):
        await Runner.run(agent, "Fetch https://example.com/a", hooks=hooks,
                         run_config=hooks.run_config(tracing_disabled=True), max_turns=40)


try:
    asyncio.run(main())
    outcome = {"stopped": False, "action": None}
except loopwatch.LoopDetected as stop:
    outcome = {"stopped": True, "action": stop.action}
guard.close()
print(json.dumps({**outcome, "tool_calls": tool_calls}))
