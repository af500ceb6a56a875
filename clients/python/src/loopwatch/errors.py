"""Exceptions of the loopwatch client.

Every exception the client raises on purpose derives from `LoopwatchError`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .check import CheckResult
    from .signal import Signal


class LoopwatchError(Exception):
    """Base class of the client's errors."""


class ConfigError(LoopwatchError, ValueError):
    """A setting (argument or environment variable) that cannot be used; the message names it."""


class TransportError(LoopwatchError):
    """loopwatch (or the signal sink) could not be reached or answered something unreadable."""


class AdminError(LoopwatchError):
    """The admin API answered an error.

    Attributes:
        status: HTTP status code (e.g. 401 wrong token, 404 unknown run, 409 nothing to deny).
        body: the response body as text (loopwatch sends `{"error": "..."}`).
    """

    def __init__(self, message: str, status: int, body: str) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


class LoopDetected(LoopwatchError):
    """The run was stopped because loopwatch detected a loop.

    Raised at the agent's next step after a `kill` signal, when a pre-execution check
    answered `deny`, or when an approval was refused.

    Attributes:
        reason: one sentence for a log or the user (loopwatch's nudge text when it has one).
        action: what stopped the run: `"kill"` (a kill signal), `"deny"` (a pre-execution
            check) or `"approval_denied"` (a `require_approval` the hook refused).
        run_key: the run's key (the trace id, lowercase hex, unless a run key was given).
        trace_id: the run's trace id, lowercase hex (32 chars).
        pattern: loopwatch's pattern name, e.g. `repeated_call`, `repeated_result`.
        tool_name: the tool whose call was blocked (pre-execution check), else None.
        signal: the `Signal` that stopped the run, if a signal did.
        check: the `CheckResult` that stopped the run, if a check did.
    """

    def __init__(
        self,
        reason: str,
        *,
        action: str,
        run_key: str,
        trace_id: str,
        pattern: str = "",
        tool_name: str | None = None,
        signal: Signal | None = None,
        check: CheckResult | None = None,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.action = action
        self.run_key = run_key
        self.trace_id = trace_id
        self.pattern = pattern
        self.tool_name = tool_name
        self.signal = signal
        self.check = check

    def copy(self) -> LoopDetected:
        """A fresh exception with the same fields (each raise site gets its own traceback)."""
        return LoopDetected(
            self.reason,
            action=self.action,
            run_key=self.run_key,
            trace_id=self.trace_id,
            pattern=self.pattern,
            tool_name=self.tool_name,
            signal=self.signal,
            check=self.check,
        )
