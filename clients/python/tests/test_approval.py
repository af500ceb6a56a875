"""Pause for approval (`require_approval`) against a real loopwatch whose `stop` profile asks
for approval instead of killing."""

from __future__ import annotations

import time

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import loopwatch
from loopwatch.approval import read_answer


@pytest.fixture
def approval_guard(lw_approval):
    """Builds guards bound to `lw_approval`; `approval_guard.spans` holds the finished spans
    (the real SDK's in-memory exporter beside the export to loopwatch)."""
    inst = loopwatch.instrument(lw_approval.grpc_endpoint, "loopwatch-approval-tests", set_global=False)
    spans = InMemorySpanExporter()
    inst.tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    guards = []

    def build(**kwargs):
        guard = loopwatch.Guard(endpoint=lw_approval.grpc_endpoint, admin_url=lw_approval.admin_url, tracer_provider=inst.tracer_provider, **kwargs)
        guards.append(guard)
        return guard

    build.spans = spans
    yield build
    for guard in guards:
        guard.close()
    inst.shutdown()


def loop(guard, calls, limit):
    @guard.tool
    def fetch_url(url: str) -> str:
        calls.append(url)
        # A real call takes time: a 0 ms tool races the signal's delivery on a loaded
        # machine (the timeliness figures for 0 ms tools are in tests/test_timeliness.py).
        time.sleep(0.025)
        return "Error: connection refused"

    for _ in range(limit):
        guard.checkpoint()
        fetch_url("https://example.com/a")


def test_pre_check_asks_and_an_approval_lets_the_run_go_on(approval_guard):
    asked: list[loopwatch.ApprovalRequest] = []

    def approve(request):
        asked.append(request)
        return True

    guard = approval_guard(check=True, on_approval=approve)
    calls: list[str] = []
    with guard.run("approved") as run:
        loop(guard, calls, 8)
    assert run.stopped is None
    assert len(calls) == 8
    assert len(asked) == 1
    request = asked[0]
    assert request.tool_name == "fetch_url" and request.arguments == {"url": "https://example.com/a"}
    assert request.check is not None and request.check.decision == "require_approval"
    assert request.profile == "stop" and request.pattern == "repeated_result"
    # the approval reset loopwatch's counters: call 6 counts as the 1st again, so call 7
    # is allowed and call 8 (3rd in a row) is a nudge, not another require_approval
    assert [c.decision for _, c in run.checks][5:] == ["require_approval", "allow", "warn"]


def test_a_refused_approval_stops_the_run_before_the_call(approval_guard):
    guard = approval_guard(check=True, on_approval=lambda request: "deny")
    calls: list[str] = []
    with pytest.raises(loopwatch.LoopDetected) as info:
        with guard.run("refused"):
            loop(guard, calls, 10)
    assert info.value.action == "approval_denied" and info.value.tool_name == "fetch_url"
    assert len(calls) == 5


def test_a_require_approval_signal_pauses_the_next_step(approval_guard, lw_approval):
    asked: list[loopwatch.ApprovalRequest] = []

    def deny(request):
        asked.append(request)
        return False

    guard = approval_guard(on_approval=deny)  # no pre-check: the signal asks
    calls: list[str] = []
    with pytest.raises(loopwatch.LoopDetected) as info:
        with guard.run("signalled") as run:
            loop(guard, calls, 30)
    assert info.value.action == "approval_denied"
    assert asked and asked[0].signal is not None and asked[0].signal.action == "require_approval"
    assert 6 <= len(calls) <= 7
    # the denial was posted: loopwatch published a kill for the run
    actions = [s["action"] for s in lw_approval.get(f"/v1/signals?trace_id={run.trace_id}")["data"]]
    assert "require_approval" in actions and "kill" in actions, actions


def approval_events(exporter):
    """(span name, event attributes) of every `loopwatch.approval` event, in span end order."""
    return [
        (span.name, dict(event.attributes))
        for span in exporter.get_finished_spans()
        for event in span.events
        if event.name == "loopwatch.approval"
    ]


def test_an_approval_is_recorded_on_the_checked_tool_span(approval_guard):
    guard = approval_guard(check=True, on_approval=lambda request: "approve")
    with guard.run("recorded") as run:
        loop(guard, [], 6)
    assert approval_events(approval_guard.spans) == [
        (
            "execute_tool fetch_url",
            {
                "loopwatch.approval.decision": "approve",
                "loopwatch.run_key": run.run_key,
                "loop.pattern": "repeated_result",
                "loop.profile": "stop",
                "gen_ai.tool.name": "fetch_url",
            },
        )
    ]


def test_the_default_denial_of_a_signal_is_recorded_on_the_run_span(approval_guard):
    guard = approval_guard()  # no hook: a require_approval signal is denied
    with pytest.raises(loopwatch.LoopDetected):
        with guard.run("no-hook") as run:
            loop(guard, [], 30)
    signal = next(s for s in run.signals if s.action == "require_approval")
    assert approval_events(approval_guard.spans) == [
        (
            "invoke_agent no-hook",
            {
                "loopwatch.approval.decision": "deny",
                "loopwatch.run_key": run.trace_id,
                "loop.pattern": signal.pattern,
                "loop.profile": "stop",
                "loopwatch.signal.id": signal.id,
            },
        )
    ]


def test_a_hook_that_raises_is_asked_again_at_the_next_step(approval_guard):
    answers = iter([RuntimeError("approver unreachable"), False])
    asked = []

    def hook(request):
        asked.append(request.signal.id)
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    guard = approval_guard(on_approval=hook)
    with pytest.raises(loopwatch.LoopDetected) as info:
        with guard.run("retried"):
            with pytest.raises(RuntimeError):
                loop(guard, [], 30)
            guard.checkpoint()
    assert info.value.action == "approval_denied"
    assert len(asked) == 2 and asked[0] == asked[1]
    assert [e["loopwatch.approval.decision"] for _, e in approval_events(approval_guard.spans)] == ["deny"]


def test_approve_and_deny_endpoints_answer_errors(approval_guard):
    guard = approval_guard()
    with pytest.raises(loopwatch.AdminError) as info:
        guard.approve("no-such-run")
    assert info.value.status == 404
    with pytest.raises(loopwatch.ConfigError):
        guard.deny("")


def test_hook_answers_are_read_strictly():
    assert read_answer(True) is True and read_answer("approve") is True
    assert read_answer(False) is False and read_answer("DENY") is False
    with pytest.raises(loopwatch.ConfigError):
        read_answer("maybe")
