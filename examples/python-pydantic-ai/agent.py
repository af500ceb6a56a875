"""A pydantic-ai agent stuck in a loop, stopped by loopwatch (capability: 3 lines).

The model is pydantic-ai's FunctionModel, scripted to call fetch_url(url=A) forever.
Env: OTEL_EXPORTER_OTLP_ENDPOINT, LOOPWATCH_ADMIN_URL. `--no-check`: signals only.
Prints one JSON line: {"stopped", "action", "tool_calls"}.
"""

import asyncio
import json
import sys

from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import FunctionModel

import loopwatch
from loopwatch.integrations.pydantic_ai import LoopwatchCapability

loopwatch.instrument(service_name="example-pydantic-ai")  # global OpenTelemetry provider
Agent.instrument_all()                                    # pydantic-ai's own GenAI spans
guard = loopwatch.Guard(check="--no-check" not in sys.argv)


def stuck_model(messages, info):
    n = sum(isinstance(p, ToolReturnPart) for m in messages for p in m.parts)
    return ModelResponse(parts=[ToolCallPart("fetch_url", {"url": "https://example.com/a"}, tool_call_id=f"c{n}")])


agent = Agent(FunctionModel(stuck_model), name="fetcher", capabilities=[LoopwatchCapability(guard)])
tool_calls = 0


@agent.tool_plain
async def fetch_url(url: str) -> str:
    """Fetches a URL."""
    global tool_calls
    tool_calls += 1
    return "Error: connection refused"


try:
    asyncio.run(agent.run("Fetch https://example.com/a"))
    outcome = {"stopped": False, "action": None}
except loopwatch.LoopDetected as stop:
    outcome = {"stopped": True, "action": stop.action}
guard.close()
print(json.dumps({**outcome, "tool_calls": tool_calls}))
