"""The core guard with a hand-written agent loop, against a real loopwatch."""

from __future__ import annotations

import asyncio
import time

import pytest

import loopwatch
from conftest import SIGNALS_ONLY_TOOL_SECONDS


def looping_agent(guard: loopwatch.Guard, calls: list[int], limit: int = 30, tool_delay: float = 0.0) -> None:
    """A hand-written loop: calls the same tool with the same arguments until stopped."""

    @guard.tool
    def fetch_url(url: str) -> str:
        calls.append(1)
        time.sleep(tool_delay)
        return "Error: connection refused"

    for _ in range(limit):
        guard.checkpoint()
        fetch_url("https://example.com/a")


def test_kill_signal_stops_a_sync_loop_within_one_call(make_guard):
    guard = make_guard()
    calls: list[int] = []
    with pytest.raises(loopwatch.LoopDetected) as info:
        with guard.run("sync-loop") as run:
            looping_agent(guard, calls, tool_delay=SIGNALS_ONLY_TOOL_SECONDS)
    exc = info.value
    assert exc.action == "kill"
    assert exc.pattern == "repeated_result"
    assert exc.trace_id == run.trace_id and exc.run_key == run.trace_id
    assert exc.signal is not None and exc.signal.profile == "stop"
    # stop fires at the 6th identical call; the kill must land before the 8th
    assert 6 <= len(calls) <= 7, calls
    warns = [s for s in run.signals if s.action == "warn"]
    assert warns and warns[0].pattern == "repeated_result"


def test_a_stopped_run_span_says_why(make_guard, spans):
    guard = make_guard()
    with pytest.raises(loopwatch.LoopDetected) as info:
        with guard.run("marked-loop"):
            looping_agent(guard, [])
    run_spans = [s for s in spans.get_finished_spans() if s.name == "invoke_agent marked-loop"]
    assert len(run_spans) == 1, [s.name for s in spans.get_finished_spans()]
    span = run_spans[0]
    assert span.attributes["loopwatch.stopped"] == "kill"
    events = [e for e in span.events if e.name == "loopwatch.stopped"]
    assert len(events) == 1
    assert dict(events[0].attributes) == {
        "loopwatch.stop.action": "kill",
        "loopwatch.stop.pattern": "repeated_result",
        "loopwatch.stop.message": info.value.reason,
    }


def test_pre_check_blocks_the_threshold_call(make_guard):
    guard = make_guard(check=True)
    calls: list[int] = []
    nudged: list[str] = []
    guard.on_warn = lambda run, message: nudged.append(message)
    with pytest.raises(loopwatch.LoopDetected) as info:
        with guard.run("checked-loop") as run:
            looping_agent(guard, calls)
    exc = info.value
    assert exc.action == "deny"
    assert exc.tool_name == "fetch_url"
    assert exc.check is not None and exc.check.decision == "deny" and exc.check.profile == "stop"
    assert len(calls) == 5, "the 6th identical call must be blocked before it runs"
    decisions = [c.decision for _, c in run.checks]
    assert decisions[:2] == ["allow", "allow"]
    assert decisions[2] == "warn" and decisions[-1] == "deny"
    # the nudge of call 3 was handed over once, not again when the warn signal came
    assert len(nudged) >= 1 and nudged[0] == run.checks[2][1].message


def test_unknown_run_is_allowed(make_guard, lw):
    guard = make_guard(check=True)
    with guard.run("fresh") as run:
        result = guard.before_tool("anything", {"x": 1})
    assert result is not None and result.decision == "allow" and result.known_run is False
    assert run.stopped is None


def test_async_run_is_cancelled_mid_tool_by_a_kill(make_guard):
    guard = make_guard()
    calls: list[float] = []

    @guard.tool
    async def slow_fetch(url: str) -> str:
        calls.append(time.perf_counter())
        await asyncio.sleep(0.2 if len(calls) > 6 else 0.01)
        return "Error: timeout"

    async def main() -> loopwatch.Run:
        async with guard.run("async-loop") as run:
            for _ in range(30):
                await slow_fetch("https://example.com/b")
        return run

    with pytest.raises(loopwatch.LoopDetected) as info:
        asyncio.run(main())
    assert info.value.action == "kill"
    assert len(calls) <= 7


def test_the_watch_filter_follows_the_provider_not_the_last_instrument(lw, inst):
    import loopwatch as lwmod
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    other = lwmod.instrument(service_name="some-other-service", exporter=InMemorySpanExporter(), set_global=False)
    guard = lwmod.Guard(endpoint=lw.grpc_endpoint, admin_url=lw.admin_url, tracer_provider=inst.tracer_provider)
    try:
        assert guard.service_name == inst.service_name != other.service_name
    finally:
        guard.close()
        other.shutdown()
