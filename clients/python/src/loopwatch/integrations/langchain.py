"""LangChain v1 / LangGraph integration: `LoopwatchMiddleware` for `create_agent`.

    guard = loopwatch.Guard(check=True)
    agent = create_agent(model, tools, middleware=[LoopwatchMiddleware(guard)])
    with guard.run("support"):                      # or `async with` around `ainvoke`
        agent.invoke({"messages": [...]})

LangChain does not trace to OpenTelemetry by itself, so the middleware traces each tool call
as a GenAI `execute_tool` span (arguments, result, `gen_ai.tool.call.decision`):
- `wrap_tool_call` / `awrap_tool_call`: `checkpoint` + pre-execution check; a denied call
  raises `LoopDetected` before the tool runs;
- `before_model` / `abefore_model`: `checkpoint` (a kill raises `LoopDetected` before the
  next model call), and pending nudges are added to the conversation state as a
  `HumanMessage` (kept in the history);
- with `async with guard.run()`, a kill signal cancels the task running `ainvoke`.
"""

from __future__ import annotations

from typing import Any, Callable

try:
    from langchain.agents.middleware import AgentMiddleware
    from langchain_core.messages import HumanMessage, ToolMessage
except ImportError as err:  # pragma: no cover - depends on the environment
    raise ImportError("loopwatch.integrations.langchain needs `pip install loopwatch[langchain]`") from err

from ..guard import Guard
from . import nudge_text


def _result(message: Any) -> Any:
    """What the tool returned, as its `ToolMessage` carries it (a `Command` as is)."""
    if isinstance(message, ToolMessage):
        return message.content
    return message


class LoopwatchMiddleware(AgentMiddleware):
    """Agent middleware connecting `create_agent` agents to a `Guard` (use inside `guard.run()`).

    Args:
        guard: the guard (its `check` setting turns the pre-execution check on).
    """

    def __init__(self, guard: Guard) -> None:
        super().__init__()
        self.guard = guard

    @property
    def name(self) -> str:
        return "LoopwatchMiddleware"

    def _nudge_update(self) -> dict[str, Any] | None:
        run = self.guard.require_run()
        nudges = run.take_nudges()
        if not nudges:
            return None
        return {"messages": [HumanMessage(content=nudge_text(m)) for m in nudges]}

    def before_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        self.guard.checkpoint()
        return self._nudge_update()

    async def abefore_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        await self.guard.acheckpoint()
        return self._nudge_update()

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        call = request.tool_call
        with self.guard.tool_call(call["name"], call.get("args"), call_id=call.get("id")) as tool_call:
            result = handler(request)
            tool_call.set_result(_result(result))
            return result

    async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        call = request.tool_call
        async with self.guard.tool_call(call["name"], call.get("args"), call_id=call.get("id")) as tool_call:
            result = await handler(request)
            tool_call.set_result(_result(result))
            return result
