"""`Run`: the client-side state of one agent run (its trace id, run key, stop, nudges),
and `RunScope`, the context manager `Guard.run()` returns."""

from __future__ import annotations

import asyncio
import collections
import contextvars
import threading
import time
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import trace

from .errors import LoopDetected

if TYPE_CHECKING:
    from .check import CheckResult
    from .guard import Guard
    from .signal import Signal

_current_run: contextvars.ContextVar[Run | None] = contextvars.ContextVar("loopwatch_run", default=None)


def current_run() -> Run | None:
    """The run of the innermost `Guard.run()` scope in this context, or None."""
    return _current_run.get()


STOPPED_EVENT = "loopwatch.stopped"
"""Name of the span event a stopped run's span carries (the TypeScript client's too)."""


def record_stop(span: trace.Span, stop: LoopDetected) -> None:
    """Marks `span` (the run's span) as stopped by loopwatch, as both clients do.

    Sets the attribute `loopwatch.stopped` to the stop's action (`kill`, `deny` or
    `approval_denied`) so that a trace query can find stopped runs, and adds the event
    `loopwatch.stopped` with `loopwatch.stop.action`, `loopwatch.stop.pattern` (the detected
    pattern, `""` when none was given) and `loopwatch.stop.message` (the stop's sentence).
    """
    span.set_attribute("loopwatch.stopped", stop.action)
    span.add_event(
        STOPPED_EVENT,
        {
            "loopwatch.stop.action": stop.action,
            "loopwatch.stop.pattern": stop.pattern,
            "loopwatch.stop.message": stop.reason,
        },
    )


class Run:
    """One agent run as the guard sees it. Thread-safe: signals arrive on the transport's thread.

    Attributes:
        name: the name given to `Guard.run()`.
        trace_id: the run's trace id, lowercase hex (32 chars).
        run_key: loopwatch's run key: the trace id unless one was given.
        explicit_run_key: whether `run_key` was given (then it is sent with checks).
        span: the run's root span (`invoke_agent {name}`).
        started_ns: wall-clock start, ns since the Unix epoch.
        signals: every signal delivered to this run, in arrival order.
        checks: `(tool_name, CheckResult)` of every pre-execution check, in order.
    """

    def __init__(self, guard: Guard, name: str, span: trace.Span, run_key: str | None) -> None:
        self.guard = guard
        self.name = name
        self.span = span
        self.trace_id = format(span.get_span_context().trace_id, "032x")
        self.run_key = run_key or self.trace_id
        self.explicit_run_key = run_key is not None
        self.started_ns = time.time_ns()
        self.signals: list[Signal] = []
        self.checks: list[tuple[str, CheckResult]] = []
        self._lock = threading.Lock()
        self._stop: LoopDetected | None = None
        self._stopped_at: float | None = None
        self._nudges: list[str] = []
        self._echo: collections.Counter[str] = collections.Counter()
        self._approvals: list[Signal] = []
        self._task: asyncio.Task[Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._active = True
        self.cancelled_by_guard = False

    # --- stop -------------------------------------------------------------------------

    @property
    def stopped(self) -> LoopDetected | None:
        """The `LoopDetected` that stopped the run, or None while it may go on."""
        return self._stop

    @property
    def stopped_at(self) -> float | None:
        """`time.perf_counter()` when the stop was decided (signal received, check answered)."""
        return self._stopped_at

    def raise_if_stopped(self) -> None:
        """Raises the run's `LoopDetected` (a fresh copy) if it was stopped."""
        stop = self._stop
        if stop is not None:
            raise stop.copy()

    def _set_stop(self, exc: LoopDetected) -> bool:
        """Records the stop; False if the run was already stopped (the first stop wins)."""
        with self._lock:
            if self._stop is not None:
                return False
            self._stop = exc
            self._stopped_at = time.perf_counter()
            return True

    # --- nudges -----------------------------------------------------------------------

    def take_nudges(self) -> list[str]:
        """The nudge texts (loopwatch's `message`) not handed to the model yet, oldest first;
        they are removed. Integrations call this before each model request."""
        with self._lock:
            nudges, self._nudges = self._nudges, []
        return nudges

    def _add_nudge(self, text: str, *, expect_echo: bool = False) -> bool:
        """Queues a nudge; False when it is the echo of one a check already queued."""
        with self._lock:
            if not expect_echo and self._echo[text] > 0:
                self._echo[text] -= 1
                return False
            if expect_echo:
                self._echo[text] += 1
            self._nudges.append(text)
            return True

    # --- approvals --------------------------------------------------------------------

    def _add_approval(self, signal: Signal) -> None:
        with self._lock:
            self._approvals.append(signal)

    def _take_approvals(self) -> list[Signal]:
        with self._lock:
            pending, self._approvals = self._approvals, []
        return pending

    def _return_approvals(self, signals: list[Signal]) -> None:
        """Puts unanswered approvals back, ahead of any that arrived meanwhile."""
        with self._lock:
            self._approvals[:0] = signals

    # --- asyncio cancellation ---------------------------------------------------------

    def bind_task(self, task: asyncio.Task[Any] | None = None) -> None:
        """Cancels `task` (default: the current task) when a kill signal arrives.

        `Guard.run()` used with `async with` binds the task that entered it.
        Raises RuntimeError outside a running event loop when `task` is None.
        """
        self._loop = asyncio.get_running_loop() if task is None else task.get_loop()
        self._task = task or asyncio.current_task()

    def _cancel_task(self) -> None:
        """Schedules the bound task's cancellation on its loop (any thread)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(self._cancel_in_loop)
        except RuntimeError:  # loop closed meanwhile
            pass

    def _cancel_in_loop(self) -> None:
        # Runs on the task's loop: the scope cannot close between this check and the cancel.
        task = self._task
        if self._active and task is not None and not task.done():
            self.cancelled_by_guard = True
            stop = self._stop
            task.cancel(msg=f"loopwatch: {stop.reason}" if stop else "loopwatch")

    def __repr__(self) -> str:
        return f"Run(name={self.name!r}, run_key={self.run_key!r}, stopped={self._stop is not None})"


class RunScope:
    """Context manager of `Guard.run()`, for `with` and `async with`.

    Entering starts the run's root span `invoke_agent {name}` (a child of the current span,
    if any; or adopts the `span` given, which it then neither ends nor changes the status of),
    makes it current, registers the run with the guard and returns the `Run`.
    Leaving ends the span and unregisters the run. If the run was stopped and the block
    ends with another exception (a framework wrapping `LoopDetected`, or the task
    cancelled by a kill), the run's `LoopDetected` is raised from it instead.
    """

    def __init__(
        self,
        guard: Guard,
        name: str,
        run_key: str | None,
        attributes: dict[str, Any] | None,
        span: trace.Span | None = None,
    ) -> None:
        self._guard = guard
        self._adopted = span
        self._name = name
        self._run_key = run_key
        self._attributes = attributes or {}
        self._run: Run | None = None
        self._tokens: tuple[Any, Any] | None = None

    def _enter(self) -> Run:
        guard = self._guard
        guard.start()
        if self._adopted is not None:
            span = self._adopted
        else:
            attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": self._name}
            attributes.update(self._attributes)
            span = guard.tracer.start_span(f"invoke_agent {self._name}", attributes=attributes)
        run = Run(guard, self._name, span, self._run_key)
        ctx_token = otel_context.attach(trace.set_span_in_context(span))
        run_token = _current_run.set(run)
        self._tokens = (ctx_token, run_token)
        self._run = run
        guard._register(run)
        return run

    def _exit(self, exc: BaseException | None) -> None:
        run = self._run
        assert run is not None and self._tokens is not None
        run._active = False
        self._guard._unregister(run)
        ctx_token, run_token = self._tokens
        _current_run.reset(run_token)
        otel_context.detach(ctx_token)
        if self._adopted is not None:
            if run.stopped is not None:  # the owner of the span ends it, with its own status
                record_stop(run.span, run.stopped)
            return
        if run.stopped is not None:
            record_stop(run.span, run.stopped)
            run.span.set_status(trace.Status(trace.StatusCode.ERROR, run.stopped.reason))
        elif exc is not None:
            run.span.record_exception(exc)
            run.span.set_status(trace.Status(trace.StatusCode.ERROR, type(exc).__name__))
        run.span.end()

    def __enter__(self) -> Run:
        return self._enter()

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self._exit(exc)
        run = self._run
        assert run is not None
        if exc is not None and run.stopped is not None and not isinstance(exc, LoopDetected):
            raise run.stopped.copy() from exc

    async def __aenter__(self) -> Run:
        run = self._enter()
        if self._guard.cancel_task:
            run.bind_task()
        return run

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self._exit(exc)
        run = self._run
        assert run is not None
        if isinstance(exc, asyncio.CancelledError) and run.cancelled_by_guard:
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
        if exc is not None and run.stopped is not None and not isinstance(exc, LoopDetected):
            raise run.stopped.copy() from exc
