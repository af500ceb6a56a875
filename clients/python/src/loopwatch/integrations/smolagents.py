"""smolagents integration: `guard_agent(guard, agent)` (ToolCallingAgent and CodeAgent).

    guard = loopwatch.Guard(check=True)
    agent = guard_agent(guard, ToolCallingAgent(tools=[...], model=model))
    with guard.run("researcher"):
        agent.run("...")                 # raises loopwatch.LoopDetected when loopwatch stops it

smolagents does not trace to OpenTelemetry by itself; `guard_agent` wraps each tool's
`forward` so every call is a GenAI `execute_tool` span (arguments, result,
`gen_ai.tool.call.decision`) with the pre-execution check before it, and registers a step
callback:
- a denied call does not run (smolagents records the error in the step), and the step
  callback then raises `LoopDetected`;
- the step callback runs after every step: `checkpoint` (a kill raises `LoopDetected`,
  which smolagents does not catch), and pending nudges are appended to the step's
  observations, which the model reads in its next step.
smolagents runs synchronously: a kill stops the agent at its next step or tool call.
"""

from __future__ import annotations

import functools
from typing import Any

try:
    from smolagents.memory import ActionStep
except ImportError as err:  # pragma: no cover - depends on the environment
    raise ImportError("loopwatch.integrations.smolagents needs `pip install loopwatch[smolagents]`") from err

from ..guard import Guard
from ..tool_call import bound_arguments
from . import nudge_text

_WRAPPED = "_loopwatch_wrapped"


def _guard_tool(guard: Guard, tool: Any) -> None:
    forward = tool.forward
    if getattr(forward, _WRAPPED, False):
        return

    @functools.wraps(forward)
    def guarded_forward(*args: Any, **kwargs: Any) -> Any:
        with guard.tool_call(tool.name, bound_arguments(forward, args, kwargs)) as call:
            result = forward(*args, **kwargs)
            call.set_result(result)
            return result

    setattr(guarded_forward, _WRAPPED, True)
    tool.forward = guarded_forward


def guard_agent(guard: Guard, agent: Any) -> Any:
    """Connects a smolagents agent to `guard` (idempotent) and returns it.

    Raises TypeError when `agent` has no `tools` dict or step-callback registry.
    """
    tools = getattr(agent, "tools", None)
    registry = getattr(agent, "step_callbacks", None)
    if not isinstance(tools, dict) or registry is None:
        raise TypeError(f"guard_agent: {type(agent).__name__} is not a smolagents MultiStepAgent")
    for tool in tools.values():
        _guard_tool(guard, tool)
    if getattr(agent, _WRAPPED, False):
        return agent

    def after_step(step: Any, agent: Any = None) -> None:
        run = guard.require_run()
        nudges = run.take_nudges()
        if nudges:
            text = "\n".join(nudge_text(m) for m in nudges)
            step.observations = f"{step.observations}\n{text}" if step.observations else text
        guard.checkpoint(run)

    registry.register(ActionStep, after_step)
    setattr(agent, _WRAPPED, True)
    return agent
