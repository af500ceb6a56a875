"""pydantic-ai integration: `LoopwatchCapability`, an agent capability.

    guard = loopwatch.Guard(check=True)
    agent = Agent(model, capabilities=[LoopwatchCapability(guard)])
    await agent.run("...")            # raises loopwatch.LoopDetected when loopwatch stops it

Each run becomes a guard run (adopting pydantic-ai's own `invoke_agent` span when its
instrumentation is on, e.g. `Agent.instrument_all()` after `loopwatch.instrument()`; else a
run span of its own), unless the agent runs inside a `guard.run()` already.
- before each tool call: `checkpoint` + pre-execution check; a denied call never runs; the
  decision is recorded on pydantic-ai's `execute_tool` span (or on the client's own
  `execute_tool` span when pydantic-ai's instrumentation is off);
- nudges (`warn`) are enqueued into the conversation (`RunContext.enqueue`) right after the
  tool result, so the model sees them on its next request;
- before each model request: `checkpoint` (a kill raises `LoopDetected`);
- a kill signal cancels the run's task at once (`Guard(cancel_task=True)`, the default).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace

try:
    from pydantic_ai.capabilities import AbstractCapability
except ImportError as err:  # pragma: no cover - depends on the environment
    raise ImportError("loopwatch.integrations.pydantic_ai needs `pip install loopwatch[pydantic-ai]`") from err

from ..guard import DECISION_ATTRIBUTE, Guard
from ..run import current_run
from . import nudge_text


def _framework_tool_span(tool_name: str) -> trace.Span | None:
    """pydantic-ai's `execute_tool` span of this call when its instrumentation made one."""
    span = trace.get_current_span()
    attributes = getattr(span, "attributes", None) or {}
    if span.is_recording() and attributes.get("gen_ai.operation.name") == "execute_tool" and attributes.get(
        "gen_ai.tool.name"
    ) == tool_name:
        return span
    return None


@dataclass
class LoopwatchCapability(AbstractCapability[Any]):
    """Connects an agent's runs to a `Guard`.

    Args:
        guard: the guard (its `check` setting turns the pre-execution check on).
        name: agent name for runs this capability starts (default: the agent's name or "agent").
    """

    guard: Guard
    name: str | None = None
    _agent_name: str | None = field(default=None, repr=False, init=False)

    def for_agent(self, agent: Any) -> Any:
        """Remembers the agent's name for the runs it starts."""
        self._agent_name = getattr(agent, "name", None)
        return super().for_agent(agent)

    async def wrap_run(self, ctx: Any, *, handler: Any) -> Any:
        existing = current_run()
        if existing is not None and existing.guard is self.guard:
            return await handler()
        span = trace.get_current_span()
        name = self.name or self._agent_name or "agent"
        adopt = span if span.is_recording() and span.get_span_context().is_valid else None
        async with self.guard.run(name, span=adopt):
            return await handler()

    async def before_model_request(self, ctx: Any, request_context: Any) -> Any:
        run = self.guard.require_run()
        await self.guard.acheckpoint(run)
        for message in run.take_nudges():
            ctx.enqueue(nudge_text(message))
        return request_context

    async def wrap_tool_execute(self, ctx: Any, *, call: Any, tool_def: Any, args: Any, handler: Any) -> Any:
        run = self.guard.require_run()
        tool_name = call.tool_name
        span = _framework_tool_span(tool_name)
        if span is None:
            # pydantic-ai's instrumentation is off: trace the call ourselves.
            async with self.guard.tool_call(tool_name, args, call_id=call.tool_call_id, run=run) as tool_call:
                result = await handler(args)
                tool_call.set_result(result)
        else:
            await self.guard.acheckpoint(run)
            try:
                check = await self.guard.acheck_call(tool_name, args, run)
            except BaseException as denied:
                stop = run.stopped
                if stop is not None and stop.check is not None:
                    span.set_attribute(DECISION_ATTRIBUTE, "deny")
                raise denied
            if check is not None:
                span.set_attribute(DECISION_ATTRIBUTE, check.decision)
            result = await handler(args)
        for message in run.take_nudges():
            ctx.enqueue(nudge_text(message))
        return result
