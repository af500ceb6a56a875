"""Pause for approval: what the approval hook is given and how its answer is read."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Union

from .errors import ConfigError

if TYPE_CHECKING:
    from .check import CheckResult
    from .run import Run
    from .signal import Signal


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


def call_sync(hook: ApprovalHook, request: ApprovalRequest) -> bool:
    """Calls `hook` from synchronous code (a coroutine is run with `asyncio.run`)."""
    answer = hook(request)
    if inspect.isawaitable(answer):
        import asyncio

        async def wait() -> Any:
            return await answer

        answer = asyncio.run(wait())
    return read_answer(answer)


async def call_async(hook: ApprovalHook, request: ApprovalRequest) -> bool:
    """Calls `hook` from async code: awaited if a coroutine function, else run in a thread
    (a human may take minutes; the event loop keeps running)."""
    import asyncio

    if inspect.iscoroutinefunction(hook):
        return read_answer(await hook(request))
    answer = await asyncio.to_thread(hook, request)
    if inspect.isawaitable(answer):
        answer = await answer
    return read_answer(answer)
