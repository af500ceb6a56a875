"""Pause for approval: what the approval hook is given, how its answer is read, recorded
(span event `loopwatch.approval`) and posted to loopwatch."""

from __future__ import annotations

import inspect
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Union

from opentelemetry import trace

from .errors import AdminError, ConfigError, LoopDetected, LoopwatchError

if TYPE_CHECKING:
    from .check import CheckResult
    from .guard import Guard
    from .run import Run
    from .signal import Signal

log = logging.getLogger("loopwatch")

@dataclass(frozen=True)
class ApprovalRequest:
    """What a `require_approval` is about, handed to the guard's `on_approval` hook.

    Attributes:
        run: the run asking.
        message: loopwatch's text about the loop (show it to the approver).
        pattern: the loop's pattern, e.g. `repeated_call`.
        profile: the profile whose action is `require_approval`.
        tool_name: the tool about to run (from a pre-execution check), else None.
        arguments: its arguments, else None.
        signal: the `require_approval` signal (the call already ran), else None.
        check: the `CheckResult` (the call has not run yet), else None.
    """

    run: Run
    message: str
    pattern: str
    profile: str
    tool_name: str | None = None
    arguments: Any = None
    signal: Signal | None = None
    check: CheckResult | None = None


#: An approval hook: returns True / "approve" to let the run go on, False / "deny" to stop
#: it; may be a coroutine function (awaited in async integrations, run to completion with
#: `asyncio.run` in sync ones).
ApprovalHook = Callable[[ApprovalRequest], Union[bool, str, Awaitable[Union[bool, str]]]]


def read_answer(answer: Any) -> bool:
    """True for approve (`True`, `"approve"`, `"approved"`), False for deny (`False`,
    `"deny"`, `"denied"`). Raises ConfigError for anything else (a hook bug must not
    silently approve)."""
    if isinstance(answer, bool):
        return answer
    if isinstance(answer, str) and answer.lower() in ("approve", "approved"):
        return True
    if isinstance(answer, str) and answer.lower() in ("deny", "denied"):
        return False
    raise ConfigError(f"approval hook must return True/False or 'approve'/'deny', got {answer!r}")


#: Name of the span event recording an approval hook's answer.
APPROVAL_EVENT = "loopwatch.approval"


def record_answer(request: ApprovalRequest, approved: bool) -> None:
    """Records the answer to `request` as the span event `loopwatch.approval` on the current
    span when it is recording and of the run's trace, else on the run's root span (when
    recording), else nowhere.

    Attributes: `loopwatch.approval.decision` (`approve` | `deny`; also `deny` when no hook
    is set), `loopwatch.run_key`, `loop.pattern` and `loop.profile` (loopwatch's names for
    the detection's pattern and profile, `docs/DESIGN.md` §5), `loopwatch.signal.id` when a
    signal asked, `gen_ai.tool.name` when a pre-execution check asked.
    """
    span = trace.get_current_span()
    if not span.is_recording() or format(span.get_span_context().trace_id, "032x") != request.run.trace_id:
        span = request.run.span
        if not span.is_recording():
            return
    attributes: dict[str, str] = {
        "loopwatch.approval.decision": "approve" if approved else "deny",
        "loopwatch.run_key": request.run.run_key,
        "loop.pattern": request.pattern,
        "loop.profile": request.profile,
    }
    if request.signal is not None:
        attributes["loopwatch.signal.id"] = request.signal.id
    if request.tool_name is not None:
        attributes["gen_ai.tool.name"] = request.tool_name
    span.add_event(APPROVAL_EVENT, attributes)


def _no_hook() -> bool:
    log.warning("loopwatch: require_approval without an on_approval hook: denying")
    return False


def call_sync(hook: ApprovalHook | None, request: ApprovalRequest) -> bool:
    """Calls `hook` from synchronous code (a coroutine is run with `asyncio.run`); no hook
    denies."""
    if hook is None:
        return _no_hook()
    answer = hook(request)
    if inspect.isawaitable(answer):
        import asyncio

        async def wait() -> Any:
            return await answer

        answer = asyncio.run(wait())
    return read_answer(answer)


async def call_async(hook: ApprovalHook | None, request: ApprovalRequest) -> bool:
    """Calls `hook` from async code: awaited if a coroutine function, else run in a thread
    (a human may take minutes; the event loop keeps running); no hook denies."""
    import asyncio

    if hook is None:
        return _no_hook()

    if inspect.iscoroutinefunction(hook):
        return read_answer(await hook(request))
    answer = await asyncio.to_thread(hook, request)
    if inspect.isawaitable(answer):
        answer = await answer
    return read_answer(answer)


def apply_answer(guard: Guard, request: ApprovalRequest, approved: bool) -> None:
    """Records the answer (`record_answer`) and posts it with `guard.approve` / `guard.deny`
    (a failed post is logged; a deny answered 404/409, nothing awaiting, is expected after
    a pre-execution check). A refusal stops the run: raises `LoopDetected(action="approval_denied")`."""
    run = request.run
    record_answer(request, approved)
    if approved:
        try:
            guard.approve(run.run_key)
        except LoopwatchError as err:
            log.warning("loopwatch: could not record the approval of %s: %s", run.run_key, err)
        return
    exc = LoopDetected(
        request.message or "approval refused",
        action="approval_denied",
        run_key=run.run_key,
        trace_id=run.trace_id,
        pattern=request.pattern,
        tool_name=request.tool_name,
        signal=request.signal,
        check=request.check,
    )
    # Stopped before the deny is posted: the kill loopwatch publishes for it comes back on
    # the signal stream and must not win the race to be the run's reason.
    guard._stop(run, exc, cancel=False)
    try:
        guard.deny(run.run_key)
    except AdminError as err:
        if err.status not in (404, 409):
            log.warning("loopwatch: could not record the denial of %s: %s", run.run_key, err)
    except LoopwatchError as err:
        log.warning("loopwatch: could not record the denial of %s: %s", run.run_key, err)
    run.raise_if_stopped()
