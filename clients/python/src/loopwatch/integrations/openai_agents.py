"""OpenAI Agents SDK integration: `LoopwatchHooks` (run hooks plus a model input filter).

    guard = loopwatch.Guard(check=True)
    hooks = LoopwatchHooks(guard)
    async with guard.run("support"):
        await Runner.run(agent, "...", hooks=hooks, run_config=hooks.run_config())

The SDK traces to its own backend, not OpenTelemetry, so the hooks trace each function-tool
call as a GenAI `execute_tool` span (arguments, result, `gen_ai.tool.call.decision`):
- `on_tool_start`: `checkpoint` + pre-execution check; a denied call raises `LoopDetected`
  before the tool runs (the SDK runs the tool after its `on_tool_start` hooks);
- `on_tool_end`: the result goes on the span and the span ends (exported at once);
- `on_llm_start`: `checkpoint` (a kill raises `LoopDetected` before the next model call);
- the model input filter (`run_config()`, or `input_filter` in your own `RunConfig`) adds
  pending nudges as a user message to the model's input;
- a kill signal cancels the task that entered `async with guard.run()`.
"""

from __future__ import annotations

import json
from typing import Any

try:
    from agents import RunConfig, RunHooks
    from agents.run_config import CallModelData, ModelInputData
except ImportError as err:  # pragma: no cover - depends on the environment
    raise ImportError("loopwatch.integrations.openai_agents needs `pip install loopwatch[openai-agents]`") from err

from ..guard import Guard
from ..tool_call import ToolCall
from . import nudge_text


def _arguments(raw: Any) -> Any:
    """The tool call's arguments: the SDK gives JSON text; decoded when it is JSON."""
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


class LoopwatchHooks(RunHooks[Any]):
    """Run hooks connecting `Runner.run` to a `Guard` (use inside `guard.run()`).

    Args:
        guard: the guard (its `check` setting turns the pre-execution check on).
    """

    def __init__(self, guard: Guard) -> None:
        super().__init__()
        self.guard = guard
        self._calls: dict[str, ToolCall] = {}

    async def on_llm_start(self, context: Any, agent: Any, system_prompt: Any, input_items: Any) -> None:
        await self.guard.acheckpoint()

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        name = getattr(context, "tool_name", None) or getattr(tool, "name", "tool")
        call_id = getattr(context, "tool_call_id", None)
        call = self.guard.tool_call(name, _arguments(getattr(context, "tool_arguments", None)), call_id=call_id, activate=False)
        await call.astart()  # raises LoopDetected for a denied call: the tool does not run
        self._calls[call.call_id] = call

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
        call = self._calls.pop(getattr(context, "tool_call_id", ""), None)
        if call is not None:
            call.set_result(result)
            call.finish()

    async def on_agent_end(self, context: Any, agent: Any, output: Any) -> None:
        self._end_open_calls()

    def _end_open_calls(self) -> None:
        for call in self._calls.values():
            call.finish()
        self._calls.clear()

    def input_filter(self, data: CallModelData[Any]) -> ModelInputData:
        """`RunConfig.call_model_input_filter`: appends pending nudges as a user message."""
        run = self.guard.current_run()
        model_data = data.model_data
        if run is None:
            return model_data
        nudges = run.take_nudges()
        if not nudges:
            return model_data
        extra = [{"role": "user", "content": nudge_text(m)} for m in nudges]
        return ModelInputData(input=[*model_data.input, *extra], instructions=model_data.instructions)

    def run_config(self, **kwargs: Any) -> RunConfig:
        """A `RunConfig(**kwargs)` with `call_model_input_filter` set to `input_filter`.

        Raises ValueError when kwargs already set a filter (chain them yourself).
        """
        if "call_model_input_filter" in kwargs:
            raise ValueError("run_config(): call_model_input_filter is set by loopwatch; call hooks.input_filter from yours")
        return RunConfig(call_model_input_filter=self.input_filter, **kwargs)
