"""A LangChain v1 (LangGraph) agent stuck in a loop, stopped by loopwatch (middleware).

The model is a scripted BaseChatModel subclass calling fetch_url(url=A) forever.
Env: OTEL_EXPORTER_OTLP_ENDPOINT, LOOPWATCH_ADMIN_URL. `--no-check`: signals only.
Prints one JSON line: {"stopped", "action", "tool_calls"}.
"""

import json
import sys

from langchain.agents import create_agent
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool

import loopwatch
from loopwatch.integrations.langchain import LoopwatchMiddleware

loopwatch.instrument(service_name="example-langchain")
guard = loopwatch.Guard(check="--no-check" not in sys.argv)


class StuckModel(BaseChatModel):
    @property
    def _llm_type(self):
        return "stuck-script"

    def bind_tools(self, tools, **kwargs):
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        n = sum(isinstance(m, ToolMessage) for m in messages)
        call = {"name": "fetch_url", "args": {"url": "https://example.com/a"}, "id": f"c{n}", "type": "tool_call"}
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content="", tool_calls=[call]))])


tool_calls = 0


@tool
def fetch_url(url: str) -> str:
    """Fetches a URL."""
    global tool_calls
    tool_calls += 1
    return "Error: connection refused"


agent = create_agent(StuckModel(), [fetch_url], middleware=[LoopwatchMiddleware(guard)])
try:
    with guard.run("fetcher"):
        agent.invoke({"messages": [HumanMessage("Fetch https://example.com/a")]}, {"recursion_limit": 100})
    outcome = {"stopped": False, "action": None}
except loopwatch.LoopDetected as stop:
    outcome = {"stopped": True, "action": stop.action}
guard.close()
print(json.dumps({**outcome, "tool_calls": tool_calls}))
