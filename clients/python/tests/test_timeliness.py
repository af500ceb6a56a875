"""How promptly a looping pydantic-ai agent is stopped, over 20 runs per setting, with the
client's defaults (instrument(): 50 ms batch + flush at each tool span end; gRPC Watch).

The loop: the scripted model calls fetch_url(url=A) again and again and the tool fails the
same way; loopwatch's `stop` profile fires at the 6th identical call (the threshold call).
- without the pre-check: calls made after the threshold call (target ≤ 1), and the time
  from the end of the threshold call's tool function to the agent stopping (LoopDetected
  raised out of `agent.run`);
- with the pre-check: calls made after the threshold (target 0; the threshold call itself
  must not run), and the time from the model asking for the threshold call to the stop.
Figures are printed in pytest's terminal summary (`timeliness` section).
"""

from __future__ import annotations

import asyncio
import statistics
import time

import pytest

from conftest import need_module

need_module("pydantic_ai")

from test_pydantic_ai import Agent, FunctionModel, Instrumentation, InstrumentationSettings, LoopwatchCapability  # noqa: E402
from pydantic_ai.messages import ModelResponse, ToolCallPart, ToolReturnPart  # noqa: E402

import loopwatch  # noqa: E402

RUNS = 20
THRESHOLD = 6  # loopwatch's default stop profile: repeated_result = 6
RESULTS: list[dict] = []


def one_run(guard, provider, tool_seconds: float) -> dict:
    tool_ends: list[float] = []
    asked: list[float] = []

    def script(messages, info) -> ModelResponse:
        returns = sum(isinstance(p, ToolReturnPart) for m in messages for p in getattr(m, "parts", []))
        asked.append(time.perf_counter())
        return ModelResponse(parts=[ToolCallPart("fetch_url", {"url": "https://example.com/a"}, tool_call_id=f"c{returns}")])

    agent = Agent(
        FunctionModel(script, model_name="scripted-loop"),
        name="timed",
        capabilities=[Instrumentation(settings=InstrumentationSettings(tracer_provider=provider)), LoopwatchCapability(guard)],
    )

    @agent.tool_plain
    async def fetch_url(url: str) -> str:
        """Fetches a URL."""
        if tool_seconds:
            await asyncio.sleep(tool_seconds)
        tool_ends.append(time.perf_counter())
        return "Error: connection refused"

    async def main() -> tuple[float, str] | None:
        try:
            await agent.run("fetch it")
        except loopwatch.LoopDetected as stop:
            return time.perf_counter(), stop.action  # the moment the caller sees the stop
        return None

    outcome = asyncio.run(main())
    if outcome is None:
        pytest.fail("the loop was not stopped")
    stopped, action = outcome
    if action == "deny":
        since = asked[THRESHOLD - 1]  # the model's request for the threshold call
    else:
        since = tool_ends[THRESHOLD - 1]  # the threshold call's tool function returned
    return {"action": action, "calls": len(tool_ends), "after": max(0, len(tool_ends) - THRESHOLD), "ms": (stopped - since) * 1000}


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


@pytest.mark.parametrize("tool_ms", [20, 0])
@pytest.mark.parametrize("check", [True, False], ids=["pre-check", "signals-only"])
def test_timeliness(make_guard, inst, check, tool_ms):
    guard = make_guard(check=check)
    runs = [one_run(guard, inst.tracer_provider, tool_ms / 1000) for _ in range(RUNS)]
    after = [r["after"] for r in runs]
    ms = [r["ms"] for r in runs]
    RESULTS.append(
        {
            "setting": f"{'pre-check' if check else 'signals only'}, tool {tool_ms} ms",
            "runs": RUNS,
            "calls_after_threshold": f"max {max(after)}, mean {statistics.mean(after):.2f}",
            "threshold_call_ran": any(r["calls"] >= THRESHOLD for r in runs),
            "stop_ms_p50": round(percentile(ms, 50), 1),
            "stop_ms_p99": round(percentile(ms, 99), 1),
        }
    )
    if check:
        assert all(r["action"] == "deny" for r in runs)
        assert all(r["calls"] == THRESHOLD - 1 for r in runs), [r["calls"] for r in runs]
    else:
        assert all(r["action"] == "kill" for r in runs)
        if tool_ms:
            assert max(after) <= 1, after
