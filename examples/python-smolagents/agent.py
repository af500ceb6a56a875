"""A smolagents ToolCallingAgent stuck in a loop, stopped by loopwatch (guard_agent).

The model is a scripted smolagents Model subclass calling fetch_url(url=A) at every step.
Env: OTEL_EXPORTER_OTLP_ENDPOINT, LOOPWATCH_ADMIN_URL. `--no-check`: signals only.
Prints one JSON line: {"stopped", "action", "tool_calls"}.
"""

import json
import sys

from smolagents import ToolCallingAgent, tool
from smolagents.models import ChatMessage, ChatMessageToolCall, ChatMessageToolCallFunction, MessageRole, Model

import loopwatch
from loopwatch.integrations.smolagents import guard_agent

loopwatch.instrument(service_name="example-smolagents")
guard = loopwatch.Guard(check="--no-check" not in sys.argv)


class StuckModel(Model):
    def generate(self, messages, stop_sequences=None, response_format=None, tools_to_call_from=None, **kwargs):
        function = ChatMessageToolCallFunction(name="fetch_url", arguments={"url": "https://example.com/a"})
        call = ChatMessageToolCall(id=f"c{tool_calls}", type="function", function=function)
        return ChatMessage(role=MessageRole.ASSISTANT, content="", tool_calls=[call])


tool_calls = 0


@tool
def fetch_url(url: str) -> str:
    """Fetches a URL.

    Args:
        url: the URL to fetch.
    """
    global tool_calls
    tool_calls += 1
    return "Error: connection refused"


agent = guard_agent(guard, ToolCallingAgent(tools=[fetch_url], model=StuckModel(model_id="stuck"), max_steps=30, verbosity_level=0))
try:
    with guard.run("fetcher"):
        agent.run("Fetch https://example.com/a")
    outcome = {"stopped": False, "action": None}
except loopwatch.LoopDetected as stop:
    outcome = {"stopped": True, "action": stop.action}
guard.close()
print(json.dumps({**outcome, "tool_calls": tool_calls}))
