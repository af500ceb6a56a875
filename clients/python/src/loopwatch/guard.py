"""`Guard`: hears loopwatch's signals for the runs of this process and stops, nudges or
pauses them; optionally asks loopwatch before each tool call (pre-execution check)."""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
from typing import Any, Callable

from opentelemetry import trace

from . import approval as approval_mod
from . import config
from .check import Checker, CheckResult
from .errors import ConfigError, LoopDetected, LoopwatchError, TransportError
from .run import Run, RunScope, current_run
from .signal import Signal
from .tracing import current_instrumentation
from .transports import Transport, make_transport

log = logging.getLogger("loopwatch")

#: Span attribute recording the pre-execution check's decision on the `execute_tool` span.
DECISION_ATTRIBUTE = "gen_ai.tool.call.decision"


class Guard:
    """Watches loopwatch's signals and acts on them for the runs started with `Guard.run()`.

    On `kill` the run is stopped: its `LoopDetected` is raised at the next step
    (`checkpoint`, `before_tool`, which every integration calls), the asyncio task that
    entered `async with guard.run()` is cancelled (and `LoopDetected` raised from the scope),
    and `on_kill` is called. On `warn` the nudge text is queued for the model
    (`Run.take_nudges()`, delivered by the integrations) and `on_warn` is called. On
    `require_approval` the next step calls `on_approval` and posts its answer to loopwatch
    (`/v1/runs/{key}/approve` or `/deny`).

    Args:
        endpoint: loopwatch's gRPC endpoint (`Signals/Watch`, `Guard/Check`). Default:
            `LOOPWATCH_ENDPOINT`, else the endpoint of `instrument()`, else the OTLP env.
        admin_url: admin API base URL (approve/deny, HTTP check and polling). Default:
            `LOOPWATCH_ADMIN_URL`, else `http://127.0.0.1:8787`.
        token: admin token (`admin.auth_token`). Default: `LOOPWATCH_TOKEN`.
        transport: `"grpc"` (default), `"http"`, `"redis"`, `"nats"`, or a `Transport`.
        transport_options: keyword arguments of the transport (e.g. `url=` for redis/nats,
            `interval=` for http).
        check: make a pre-execution check before each tool call (`before_tool`).
        check_transport: `"grpc"` (`Guard/Check`) or `"http"` (`POST /v1/check`).
        check_timeout: seconds per check.
        fail_closed: when a check cannot be made (loopwatch down), block the call
            (raise `TransportError`) instead of allowing it (default: allow, log a warning).
        on_kill: `callback(run, exc)` when a run is stopped (kill signal, denied check,
            refused approval). Called on the thread that learned it (a signal: the
            transport's thread); must be quick and must not raise.
        on_warn: `callback(run, message)` for each nudge queued.
        on_approval: approval hook (see `approval.ApprovalHook`). Without one, a
            `require_approval` is answered deny.
        cancel_task: cancel the asyncio task of `async with guard.run()` on kill.
        service_name: only hear signals of this `service.name` (default: the `service.name`
            of the tracer provider's resource, i.e. `instrument()`'s; "" = all services).
        tracer_provider: provider of the run and tool spans (default: `instrument()`'s, else
            the global one).
        connect_timeout: seconds `start()` waits for the signal subscription.

    Raises:
        ConfigError: unknown transport or check transport, malformed endpoint or URL.
    """

    def __init__(
        self,
        *,
        endpoint: str | None = None,
        admin_url: str | None = None,
        token: str | None = None,
        transport: str | Transport = "grpc",
        transport_options: dict[str, Any] | None = None,
        check: bool = False,
        check_transport: str = "grpc",
        check_timeout: float = 1.0,
        fail_closed: bool = False,
        on_kill: Callable[[Run, LoopDetected], None] | None = None,
        on_warn: Callable[[Run, str], None] | None = None,
        on_approval: approval_mod.ApprovalHook | None = None,
        cancel_task: bool = True,
        service_name: str | None = None,
        tracer_provider: trace.TracerProvider | None = None,
        connect_timeout: float = 5.0,
    ) -> None:
        inst = current_instrumentation()
        self.endpoint = config.grpc_endpoint(endpoint, inst.endpoint if inst else None)
        config.grpc_target(self.endpoint)
        self.token = config.token(token)
        self.admin = config.AdminClient(admin_url, self.token)
        provider = tracer_provider or (inst.tracer_provider if inst else None) or trace.get_tracer_provider()
        if service_name is None:
            # The service of the spans this guard's runs produce: its provider's resource.
            resource = getattr(provider, "resource", None)
            service_name = str(resource.attributes.get("service.name", "")) if resource is not None else ""
        self.service_name = service_name
        self.tracer = provider.get_tracer("loopwatch")
        self.check_enabled = check
        self.fail_closed = fail_closed
        self.on_kill = on_kill
        self.on_warn = on_warn
        self.on_approval = on_approval
        self.cancel_task = cancel_task
        self.connect_timeout = connect_timeout
        self._checker: Checker | None = None
        if check:
            self._checker = Checker(
                check_transport, endpoint=self.endpoint, admin=self.admin, bearer=self.token, timeout=check_timeout
            )
        if isinstance(transport, Transport):
            self.transport = transport
        else:
            options = dict(transport_options or {})
            if transport == "grpc":
                options.setdefault("endpoint", self.endpoint)
                options.setdefault("bearer", self.token)
                options.setdefault("service_name", self.service_name)
            elif transport == "http":
                options.setdefault("admin", self.admin)
            self.transport = make_transport(transport, **options)
        self._lock = threading.Lock()
        self._runs: dict[str, list[Run]] = collections.defaultdict(list)
        self._seen: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._started = False

    # --- lifecycle --------------------------------------------------------------------

    def start(self) -> bool:
        """Starts hearing signals (idempotent) and waits up to `connect_timeout` for the
        subscription. Returns whether it is in force; if not, a warning is logged and the
        transport keeps retrying in the background (runs are not held up)."""
        if not self._started:
            self._started = True
            self.transport.start(self._deliver, self._catch_up)
        if self.transport.wait_ready(self.connect_timeout):
            return True
        log.warning(
            "loopwatch: signal subscription (%s) not in force after %.1f s: %s",
            self.transport.name,
            self.connect_timeout,
            self.transport.last_error or "no answer",
        )
        return False

    def close(self) -> None:
        """Stops the transport and closes connections."""
        self.transport.close()
        if self._checker is not None:
            self._checker.close()

    def __enter__(self) -> Guard:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # --- runs -------------------------------------------------------------------------

    def run(
        self,
        name: str = "agent",
        *,
        run_key: str | None = None,
        attributes: dict[str, Any] | None = None,
        span: trace.Span | None = None,
    ) -> RunScope:
        """A scope for one agent run: `with guard.run("name") as run:` (or `async with`).

        Args:
            name: agent name (`gen_ai.agent.name` of the root span).
            run_key: loopwatch's run key when it keys runs by an attribute
                (`detection.run_key = "attribute"`); your spans must carry that attribute.
                Default: the trace id.
            attributes: more attributes of the root span.
            span: adopt this (recording) span as the run's root instead of starting one, e.g.
                a framework's own `invoke_agent` span; its trace id is the run's.
        """
        return RunScope(self, name, run_key, attributes, span)

    def current_run(self) -> Run | None:
        """The run of the current context; failing that, the run of the current span's
        trace; failing that, the only active run of this guard (frameworks that run tools
        on threads without copying context). None when none of these exists."""
        run = current_run()
        if run is not None and run.guard is self:
            return run
        ctx = trace.get_current_span().get_span_context()
        with self._lock:
            if ctx.is_valid:
                for candidate in self._runs.get(format(ctx.trace_id, "032x"), []):
                    return candidate
            active = {id(r): r for runs in self._runs.values() for r in runs}
        return next(iter(active.values())) if len(active) == 1 else None

    def require_run(self, run: Run | None = None) -> Run:
        """`run`, else `current_run()`; raises LoopwatchError when there is none."""
        run = run or self.current_run()
        if run is None:
            raise LoopwatchError("no loopwatch run here: wrap the agent call in `with guard.run(...)`")
        return run

    def _register(self, run: Run) -> None:
        with self._lock:
            self._runs[run.trace_id].append(run)
            if run.run_key != run.trace_id:
                self._runs[run.run_key].append(run)

    def _unregister(self, run: Run) -> None:
        with self._lock:
            for key in {run.trace_id, run.run_key}:
                runs = self._runs.get(key, [])
                if run in runs:
                    runs.remove(run)
                if not runs:
                    self._runs.pop(key, None)

    # --- signals ----------------------------------------------------------------------

    def _deliver(self, signal: Signal) -> None:
        """Acts on one signal (transport thread). Unknown runs and repeats (same id) are ignored."""
        with self._lock:
            if signal.id in self._seen:
                return
            self._seen[signal.id] = None
            while len(self._seen) > 8192:
                self._seen.popitem(last=False)
            runs = list(self._runs.get(signal.trace_id, []))
            for run in self._runs.get(signal.run_key, []):
                if run not in runs:
                    runs.append(run)
        for run in runs:
            run.signals.append(signal)
            if signal.action == "kill":
                exc = LoopDetected(
                    signal.message or f"loopwatch stopped this run ({signal.pattern})",
                    action="kill",
                    run_key=run.run_key,
                    trace_id=run.trace_id,
                    pattern=signal.pattern,
                    signal=signal,
                )
                self._stop(run, exc, cancel=True)
            elif signal.action == "warn":
                if signal.message and run._add_nudge(signal.message):
                    self._notify_warn(run, signal.message)
            elif signal.action == "require_approval":
                run._add_approval(signal)
            else:
                log.warning("loopwatch: ignoring a signal with unknown action %r", signal.action)

    def _catch_up(self) -> None:
        """After a reconnect: fetch the active runs' recent signals over HTTP (ids already
        seen are skipped), so a kill published while disconnected still stops its run."""
        with self._lock:
            runs = {id(r): r for rs in self._runs.values() for r in rs}.values()
        for run in runs:
            try:
                reply = self.admin.request(
                    "GET", "/v1/signals", query={"trace_id": run.trace_id, "since": str(run.started_ns - 60_000_000_000)}
                )
            except LoopwatchError as err:
                log.warning("loopwatch: cannot catch up on missed signals: %s", err)
                return
            for item in reply.get("data", []) if isinstance(reply, dict) else []:
                self._deliver(Signal.from_json(item))

    def _stop(self, run: Run, exc: LoopDetected, *, cancel: bool) -> None:
        if not run._set_stop(exc):
            return
        log.warning("loopwatch: stopping run %s: %s", run.run_key, exc.reason)
        if cancel and self.cancel_task:
            run._cancel_task()
        if self.on_kill is not None:
            try:
                self.on_kill(run, exc)
            except Exception:  # noqa: BLE001 - a callback bug must not hide the stop
                log.exception("loopwatch: on_kill callback failed")

    def _notify_warn(self, run: Run, message: str) -> None:
        if self.on_warn is not None:
            try:
                self.on_warn(run, message)
            except Exception:  # noqa: BLE001
                log.exception("loopwatch: on_warn callback failed")

    # --- steps ------------------------------------------------------------------------

    def checkpoint(self, run: Run | None = None) -> None:
        """Call at each agent step: raises the run's `LoopDetected` if it was stopped, and
        answers pending `require_approval` signals with the approval hook (which may raise
        `LoopDetected` when refused). Raises LoopwatchError outside a run."""
        run = self.require_run(run)
        run.raise_if_stopped()
        pending = run._take_approvals()
        for index, signal in enumerate(pending):
            request = approval_mod.ApprovalRequest(
                run, signal.message, signal.pattern, signal.profile, signal=signal
            )
            try:
                approved = self._ask_sync(request)
            except BaseException:
                # Unanswered (the hook raised, or paused the graph: LangGraph's interrupt):
                # asked again at the next checkpoint of this run.
                run._return_approvals(pending[index:])
                raise
            self._answer(request, approved)

    async def acheckpoint(self, run: Run | None = None) -> None:
        """`checkpoint` for async code: an approval hook does not block the event loop."""
        run = self.require_run(run)
        run.raise_if_stopped()
        pending = run._take_approvals()
        for index, signal in enumerate(pending):
            request = approval_mod.ApprovalRequest(
                run, signal.message, signal.pattern, signal.profile, signal=signal
            )
            try:
                approved = await self._ask_async(request)
            except BaseException:
                run._return_approvals(pending[index:])  # asked again, as in `checkpoint`
                raise
            await asyncio.to_thread(self._answer, request, approved)

    def before_tool(self, tool_name: str, arguments: Any, run: Run | None = None) -> CheckResult | None:
        """Call before a tool runs: `checkpoint`, then `check_call`. Returns the check's
        result (None without `check`).

        Raises LoopDetected when the call must not run; TransportError when the check
        failed and `fail_closed` is set.
        """
        run = self.require_run(run)
        self.checkpoint(run)
        return self.check_call(tool_name, arguments, run)

    async def abefore_tool(self, tool_name: str, arguments: Any, run: Run | None = None) -> CheckResult | None:
        """`before_tool` for async code (the check and the hook run off the event loop)."""
        run = self.require_run(run)
        await self.acheckpoint(run)
        return await self.acheck_call(tool_name, arguments, run)

    def check_call(self, tool_name: str, arguments: Any, run: Run | None = None) -> CheckResult | None:
        """With `check=True`: the pre-execution check of one call, acted on: `warn` queues
        the nudge, `require_approval` asks the hook, `deny` stops the run and raises
        `LoopDetected`. None without `check`."""
        if self._checker is None:
            return None
        run = self.require_run(run)
        result = self._check(run, tool_name, arguments)
        self._act(run, tool_name, arguments, result, self._ask_sync)
        return result

    async def acheck_call(self, tool_name: str, arguments: Any, run: Run | None = None) -> CheckResult | None:
        """`check_call` for async code."""
        if self._checker is None:
            return None
        run = self.require_run(run)
        result = await asyncio.to_thread(self._check, run, tool_name, arguments)
        if result.decision == "require_approval":
            request = self._approval_request(run, tool_name, arguments, result)
            approved = await self._ask_async(request)
            await asyncio.to_thread(self._act, run, tool_name, arguments, result, lambda _r: approved)
        else:
            self._act(run, tool_name, arguments, result, self._ask_sync)
        return result

    def _check(self, run: Run, tool_name: str, arguments: Any) -> CheckResult:
        assert self._checker is not None
        try:
            result = self._checker.check(
                trace_id=run.trace_id,
                run_key=run.run_key if run.explicit_run_key else None,
                tool_name=tool_name,
                arguments=arguments,
            )
        except TransportError as err:
            if self.fail_closed:
                raise
            log.warning("loopwatch: pre-execution check failed, allowing %s: %s", tool_name, err)
            result = CheckResult.allow()
        run.checks.append((tool_name, result))
        return result

    def _approval_request(self, run: Run, tool_name: str, arguments: Any, result: CheckResult) -> approval_mod.ApprovalRequest:
        return approval_mod.ApprovalRequest(
            run, result.message, result.pattern, result.profile, tool_name=tool_name, arguments=arguments, check=result
        )

    def _act(self, run: Run, tool_name: str, arguments: Any, result: CheckResult, ask: Callable[[Any], bool]) -> None:
        if result.decision == "warn":
            if result.message and run._add_nudge(result.message, expect_echo=True):
                self._notify_warn(run, result.message)
        elif result.decision == "deny":
            exc = LoopDetected(
                result.message or f"loopwatch blocked {tool_name}: it would complete a loop",
                action="deny",
                run_key=run.run_key,
                trace_id=run.trace_id,
                pattern=result.pattern,
                tool_name=tool_name,
                check=result,
            )
            self._stop(run, exc, cancel=False)
            run.raise_if_stopped()
        elif result.decision == "require_approval":
            request = self._approval_request(run, tool_name, arguments, result)
            self._answer(request, ask(request))

    def _ask_sync(self, request: approval_mod.ApprovalRequest) -> bool:
        return approval_mod.call_sync(self.on_approval, request)

    async def _ask_async(self, request: approval_mod.ApprovalRequest) -> bool:
        return await approval_mod.call_async(self.on_approval, request)

    def _answer(self, request: approval_mod.ApprovalRequest, approved: bool) -> None:
        """Records and posts the answer; a refusal stops the run (`approval.apply_answer`)."""
        approval_mod.apply_answer(self, request, approved)

    # --- admin ------------------------------------------------------------------------

    def approve(self, run_key: str) -> dict[str, Any]:
        """`POST /v1/runs/{run_key}/approve`: loopwatch resets the run's loop counters.

        Returns loopwatch's answer (`run_key`, `decision`, `profiles`). Raises AdminError
        (404 unknown run, 401 token) or TransportError.
        """
        return self._post_answer(run_key, "approve")

    def deny(self, run_key: str) -> dict[str, Any]:
        """`POST /v1/runs/{run_key}/deny`: loopwatch publishes a kill for the run.

        Raises AdminError (404 unknown run, 409 nothing awaits approval) or TransportError.
        """
        return self._post_answer(run_key, "deny")

    def _post_answer(self, run_key: str, verb: str) -> dict[str, Any]:
        if not run_key:
            raise ConfigError("run_key must not be empty")
        from urllib.parse import quote

        reply = self.admin.request("POST", f"/v1/runs/{quote(run_key, safe='')}/{verb}")
        return reply if isinstance(reply, dict) else {"answer": reply}

    # --- tool calls -------------------------------------------------------------------

    def tool_call(
        self,
        tool_name: str,
        arguments: Any,
        *,
        call_id: str | None = None,
        run: Run | None = None,
        trace_span: bool = True,
        activate: bool = True,
    ) -> Any:
        """A `ToolCall` context manager for one call (see `loopwatch.tool_call.ToolCall`).

        `trace_span=False` when the framework traces the call itself (then only the check
        runs); `activate=False` to not make its span current (calls started and finished in
        different callbacks). Raises LoopwatchError outside a run.
        """
        from .tool_call import ToolCall

        return ToolCall(
            self, tool_name, arguments, call_id=call_id, run=run, trace_span=trace_span, activate=activate
        )

    def tool(self, fn: Any = None, *, name: str | None = None) -> Any:
        """Decorator making each call of a function a guarded, traced tool call:
        `@guard.tool` or `@guard.tool(name="search")` (see `tool_call.guarded_tool`)."""
        from .tool_call import guarded_tool

        return guarded_tool(self, fn, name=name)
