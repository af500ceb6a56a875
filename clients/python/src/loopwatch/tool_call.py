"""`ToolCall`: one tool call traced as a GenAI `execute_tool` span, checked before it runs;
and `guarded_tool`, the decorator built on it for hand-written loops."""

from __future__ import annotations

import functools
import inspect
import itertools
import json
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace

from .check import CheckResult, arguments_text
from .errors import LoopDetected

if TYPE_CHECKING:
    from .guard import Guard
    from .run import Run

F = TypeVar("F", bound=Callable[..., Any])
_ids = itertools.count(1)


def result_text(result: Any) -> str:
    """A result as `gen_ai.tool.call.result` carries it: a string as is, else JSON (`str`
    for what JSON cannot hold)."""
    if isinstance(result, str):
        return result
    try:
        return json.dumps(result, default=str, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(result)


class ToolCall:
    """Context manager around one tool call (`with` or `async with`).

    On entry: `Guard.checkpoint` (raises `LoopDetected` if the run was stopped), then an `execute_tool {tool_name}` span (GenAI semantic conventions:
    `gen_ai.operation.name`, `gen_ai.tool.name`, `gen_ai.tool.call.id`,
    `gen_ai.tool.call.arguments`, and `gen_ai.tool.call.decision` when checked) is started
    as a child of the current span, or of the run's span when the current span is not in
    the run's trace, and inside it `Guard.check_call` (raises `LoopDetected` when the check
    denies). A denied call's span is ended at once (status error, no result). A call stopped
    before it ran by anything else (a failed check under `fail_closed`, an approval hook
    that raised or paused the graph with LangGraph's `interrupt`) leaves no span: it has not
    run, and it may run later (on resume), so loopwatch must not count it.
    Call `set_result(value)` with what the tool returned; on exit the span gets
    `gen_ai.tool.call.result` (or the exception, status error) and ends, which exports it
    at once under `instrument()`.

    Attributes:
        check: the pre-execution check's result, or None.
        span: the `execute_tool` span (None before entry).
    """

    def __init__(
        self,
        guard: Guard,
        tool_name: str,
        arguments: Any,
        *,
        call_id: str | None = None,
        run: Run | None = None,
        trace_span: bool = True,
        activate: bool = True,
    ) -> None:
        self.guard = guard
        self.activate = activate
        self.tool_name = tool_name
        self.arguments = arguments
        self.call_id = call_id or f"loopwatch_{next(_ids)}"
        self.run = guard.require_run(run)
        self.trace_span = trace_span
        self.check: CheckResult | None = None
        self.span: trace.Span | None = None
        self._result: Any = None
        self._has_result = False
        self._token: Any = None

    def set_result(self, value: Any) -> None:
        """Records the tool's result (written to the span on exit)."""
        self._result = value
        self._has_result = True

    def _start_span(self) -> None:
        if not self.trace_span:
            return
        current = trace.get_current_span()
        ctx = current.get_span_context()
        parent = None
        if not ctx.is_valid or format(ctx.trace_id, "032x") != self.run.trace_id:
            parent = trace.set_span_in_context(self.run.span)
        self.span = self.guard.tracer.start_span(
            f"execute_tool {self.tool_name}",
            context=parent,
            kind=trace.SpanKind.INTERNAL,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": self.tool_name,
                "gen_ai.tool.call.id": self.call_id,
                "gen_ai.tool.call.arguments": arguments_text(self.arguments),
            },
        )
        if self.activate:
            self._token = otel_context.attach(trace.set_span_in_context(self.span))

    def _record_decision(self, denied: LoopDetected | None) -> None:
        span = self.span
        if span is None:
            return
        decision = self.check.decision if self.check else None
        if denied is not None and denied.check is not None:
            decision = denied.check.decision
        if denied is not None and denied.action == "approval_denied":
            decision = "deny"
        if decision:
            span.set_attribute("gen_ai.tool.call.decision", decision)
        if denied is not None:
            span.set_attribute("error.type", "loopwatch.denied")
            span.set_status(trace.Status(trace.StatusCode.ERROR, denied.reason))
            self._finish_span()

    def _drop_span(self) -> None:
        """Leaves the span unended, so it is never exported (the call did not run)."""
        if self._token is not None:
            otel_context.detach(self._token)
            self._token = None
        self.span = None

    def _finish_span(self) -> None:
        if self._token is not None:
            otel_context.detach(self._token)
            self._token = None
        if self.span is not None and self.span.is_recording():
            self.span.end()

    def _end(self, exc: BaseException | None) -> None:
        span = self.span
        if span is None or not span.is_recording():
            self._finish_span()
            return
        if exc is not None:
            span.record_exception(exc)
            span.set_attribute("error.type", type(exc).__qualname__)
            span.set_status(trace.Status(trace.StatusCode.ERROR, str(exc) or type(exc).__name__))
        elif self._has_result:
            span.set_attribute("gen_ai.tool.call.result", result_text(self._result))
        self._finish_span()

    def start(self) -> ToolCall:
        """What entering `with` does; pair with `finish()` when the call spans two callbacks
        (then build it with `activate=False`, so no context is attached across them)."""
        self.guard.checkpoint(self.run)
        self._start_span()
        try:
            self.check = self.guard.check_call(self.tool_name, self.arguments, self.run)
        except LoopDetected as denied:
            self._record_decision(denied)
            raise
        except BaseException:
            self._drop_span()
            raise
        self._record_decision(None)
        return self

    def finish(self, exc: BaseException | None = None) -> None:
        """What leaving `with` does: records the result (or `exc`) and ends the span. Idempotent."""
        self._end(exc)

    def __enter__(self) -> ToolCall:
        return self.start()

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self._end(exc)

    async def astart(self) -> ToolCall:
        """`start` for async code."""
        await self.guard.acheckpoint(self.run)
        self._start_span()
        try:
            self.check = await self.guard.acheck_call(self.tool_name, self.arguments, self.run)
        except LoopDetected as denied:
            self._record_decision(denied)
            raise
        except BaseException:
            self._drop_span()
            raise
        self._record_decision(None)
        return self

    async def __aenter__(self) -> ToolCall:
        return await self.astart()

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self._end(exc)


def bound_arguments(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The call's arguments by parameter name (defaults applied; `self`/`cls` left out)."""
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return {"args": list(args), **kwargs}
    bound.apply_defaults()
    out: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        if name in ("self", "cls"):
            continue
        param = bound.signature.parameters[name]
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            out.update(value)
        else:
            out[name] = value
    return out


def guarded_tool(guard: Guard, fn: F | None = None, *, name: str | None = None) -> Any:
    """Decorator: every call of `fn` (sync or async) is a `ToolCall` named `name` (default:
    the function's name) with the call's arguments by parameter name, and its return value
    as the result. Must be called inside `guard.run()`. Raises what `ToolCall` raises."""

    def wrap(func: F) -> F:
        tool_name = name or func.__name__
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                async with ToolCall(guard, tool_name, bound_arguments(func, args, kwargs)) as call:
                    result = await func(*args, **kwargs)
                    call.set_result(result)
                    return result

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with ToolCall(guard, tool_name, bound_arguments(func, args, kwargs)) as call:
                result = func(*args, **kwargs)
                call.set_result(result)
                return result

        return wrapper  # type: ignore[return-value]

    return wrap(fn) if fn is not None else wrap
