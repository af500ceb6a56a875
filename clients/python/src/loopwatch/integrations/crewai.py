"""CrewAI integration: `LoopwatchCrewHooks`, CrewAI's tool- and LLM-call hooks.

    guard = loopwatch.Guard(check=True)
    with LoopwatchCrewHooks(guard), guard.run("research-crew"):
        crew.kickoff()                     # raises loopwatch.LoopDetected when loopwatch stops it

The hooks are registered globally while the `with` block lasts (`register()` /
`unregister()` to manage that yourself). CrewAI swallows exceptions from hooks except
its `HookAborted`, so the stop is raised as `CrewLoopDetected`, which is both a
`loopwatch.LoopDetected` and a `crewai.hooks.HookAborted`:
- before each tool call: `checkpoint` + pre-execution check, and an `execute_tool` span
  (arguments, `gen_ai.tool.call.decision`); a denied call is aborted before it runs;
- after each tool call: the result goes on the span, which ends (exported at once);
- before each LLM call: `checkpoint` (a kill aborts the run), and pending nudges are
  appended to the messages as a user message.
CrewAI runs the crew synchronously: a kill stops it at its next LLM or tool call.
"""

from __future__ import annotations

import collections
import threading
from typing import Any

try:
    from crewai.hooks import (
        HookAborted,
        register_after_tool_call_hook,
        register_before_llm_call_hook,
        register_before_tool_call_hook,
        unregister_after_tool_call_hook,
        unregister_before_llm_call_hook,
        unregister_before_tool_call_hook,
    )
except ImportError as err:  # pragma: no cover - depends on the environment
    raise ImportError("loopwatch.integrations.crewai needs `pip install loopwatch[crewai]`") from err

from ..errors import LoopDetected
from ..guard import Guard
from ..tool_call import ToolCall
from . import nudge_text


class CrewLoopDetected(LoopDetected, HookAborted):
    """A `LoopDetected` CrewAI lets through its hook dispatcher (a `HookAborted`)."""

    def __init__(self, stop: LoopDetected) -> None:
        LoopDetected.__init__(
            self,
            stop.reason,
            action=stop.action,
            run_key=stop.run_key,
            trace_id=stop.trace_id,
            pattern=stop.pattern,
            tool_name=stop.tool_name,
            signal=stop.signal,
            check=stop.check,
        )
        self.source = "loopwatch"


class LoopwatchCrewHooks:
    """CrewAI hooks connecting crews to a `Guard` (run the crew inside `guard.run()`).

    Args:
        guard: the guard (its `check` setting turns the pre-execution check on).
    """

    def __init__(self, guard: Guard) -> None:
        self.guard = guard
        self._open: dict[tuple[int, str], collections.deque[ToolCall]] = collections.defaultdict(collections.deque)
        self._lock = threading.Lock()

    def before_tool_call(self, context: Any) -> None:
        """CrewAI before-tool hook: checks the call and opens its span; aborts a denied call."""
        try:
            call = self.guard.tool_call(context.tool_name, dict(context.tool_input or {}), activate=False)
            call.start()
        except LoopDetected as stop:
            raise CrewLoopDetected(stop) from None
        with self._lock:
            self._open[(threading.get_ident(), context.tool_name)].append(call)

    def after_tool_call(self, context: Any) -> None:
        """CrewAI after-tool hook: records the result and ends the span."""
        with self._lock:
            queue = self._open.get((threading.get_ident(), context.tool_name))
            call = queue.popleft() if queue else None
        if call is not None:
            # The tool's own return value: CrewAI appends tool-usage reminders to
            # `tool_result` now and then, which would make identical results look different.
            raw = getattr(context, "raw_tool_result", None)
            call.set_result(raw if raw is not None else context.tool_result)
            call.finish()

    def before_llm_call(self, context: Any) -> None:
        """CrewAI before-LLM hook: aborts a stopped run; appends pending nudges to the messages."""
        run = self.guard.current_run()
        if run is None:
            return
        try:
            self.guard.checkpoint(run)
        except LoopDetected as stop:
            raise CrewLoopDetected(stop) from None
        for message in run.take_nudges():
            context.messages.append({"role": "user", "content": nudge_text(message)})

    def register(self) -> None:
        """Registers the three hooks globally (for every crew of the process)."""
        register_before_tool_call_hook(self.before_tool_call)
        register_after_tool_call_hook(self.after_tool_call)
        register_before_llm_call_hook(self.before_llm_call)

    def unregister(self) -> None:
        """Removes the hooks `register()` added."""
        unregister_before_tool_call_hook(self.before_tool_call)
        unregister_after_tool_call_hook(self.after_tool_call)
        unregister_before_llm_call_hook(self.before_llm_call)

    def __enter__(self) -> LoopwatchCrewHooks:
        self.register()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.unregister()
