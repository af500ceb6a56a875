"""A real pydantic-ai agent stuck in a loop, stopped by a loopwatch kill signal.

The agent's model is scripted (`FunctionModel`): it calls `fetch_url(url=...)` again and
again, and the tool fails the same way every time, so nothing ever changes. This is the
`repeated_result` loop: loopwatch's `stop` profile fires when the same call has returned
the same result 6 times, and publishes a kill signal. The watcher (`watcher.py`) receives
it and cancels the agent's asyncio task.

Spans leave through pydantic-ai's built-in OpenTelemetry instrumentation and the standard
OTLP/gRPC exporter, pointed at loopwatch's OTLP port.

At the end one JSON object is printed on stdout:
`{"trace_id", "tool_calls", "cancelled", "reason", "signal"}`.

Run `python agent.py --help` for the options; see README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.usage import UsageLimits

from watcher import NatsWatcher, RedisWatcher, Watcher

URL = "https://example.com/a"
ERROR = "Error: connection refused"

# The batch processor holds finished spans for up to this long before exporting them.
# The SDK default (5000 ms) is made for cost, not reaction time: loopwatch only sees a
# tool span once it is exported, so with 5 s the agent would run ~50 more failing calls
# before the 6th identical one even reached loopwatch. 50 ms keeps detection within
# about one tool call; on a real deployment pick the delay from how fast a tool call is.
SCHEDULE_DELAY_MS = 50


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--otlp-endpoint",
        default=os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317"),
        help="loopwatch's OTLP/gRPC endpoint (env OTEL_EXPORTER_OTLP_ENDPOINT; default %(default)s)",
    )
    p.add_argument(
        "--signals",
        choices=["redis", "nats", "none"],
        default="redis",
        help="where to listen for kill signals (default %(default)s; none = let it loop)",
    )
    p.add_argument(
        "--redis-url",
        default=os.environ.get("LOOPWATCH_SIGNALS__REDIS__URL", "redis://127.0.0.1:6379"),
        help="Redis URL (env LOOPWATCH_SIGNALS__REDIS__URL; default %(default)s)",
    )
    p.add_argument(
        "--redis-channel",
        default=os.environ.get("LOOPWATCH_SIGNALS__REDIS__CHANNEL", "loopwatch:signals"),
        help="loopwatch's signals.redis.channel (default %(default)s)",
    )
    p.add_argument(
        "--nats-url",
        default=os.environ.get("LOOPWATCH_SIGNALS__NATS__URL", "nats://127.0.0.1:4222"),
        help="NATS URL (env LOOPWATCH_SIGNALS__NATS__URL; default %(default)s)",
    )
    p.add_argument(
        "--nats-subject-prefix",
        default=os.environ.get("LOOPWATCH_SIGNALS__NATS__SUBJECT_PREFIX", "loopwatch.signals"),
        help="loopwatch's signals.nats.subject_prefix (default %(default)s)",
    )
    p.add_argument(
        "--max-calls",
        type=int,
        default=50,
        help="safety bound: the scripted model gives up after this many tool calls (default %(default)s)",
    )
    p.add_argument(
        "--tool-delay",
        type=float,
        default=0.1,
        help="seconds each fetch_url call takes (default %(default)s)",
    )
    p.add_argument("--service-name", default="stop-a-looping-agent", help="resource service.name")
    return p.parse_args(argv)


def tracer_provider(endpoint: str, service_name: str) -> TracerProvider:
    """A provider exporting OTLP/gRPC to `endpoint` with a short batch delay."""
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    exporter = OTLPSpanExporter(endpoint=endpoint, insecure=endpoint.startswith("http://"))
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=SCHEDULE_DELAY_MS))
    return provider


def build_agent(provider: TracerProvider, max_calls: int, tool_delay: float) -> tuple[Agent, dict[str, int]]:
    """The looping agent and its live counter (`counter["tool_calls"]`)."""
    counter = {"tool_calls": 0}
    # pydantic-ai's built-in OpenTelemetry instrumentation (GenAI semconv spans:
    # `invoke_agent`, `chat`, `execute_tool fetch_url` with arguments and result).
    Agent.instrument_all(InstrumentationSettings(tracer_provider=provider))

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        # The "model": retry the same fetch whatever the tool said, up to the safety bound.
        returns = sum(
            1 for m in messages for part in getattr(m, "parts", []) if isinstance(part, ToolReturnPart)
        )
        if returns >= max_calls:
            return ModelResponse(parts=[TextPart(f"gave up after {returns} attempts")])
        return ModelResponse(
            parts=[ToolCallPart("fetch_url", {"url": URL}, tool_call_id=f"call_{returns + 1}")]
        )

    agent = Agent(
        FunctionModel(script, model_name="scripted-loop"),
        name="looping_agent",
        instructions="Fetch the page the user asks for.",
    )

    @agent.tool_plain
    async def fetch_url(url: str) -> str:
        """Fetches a URL and returns its body."""
        counter["tool_calls"] += 1
        await asyncio.sleep(tool_delay)  # a network call that takes a while, then fails
        return ERROR

    return agent, counter


def make_watcher(args: argparse.Namespace) -> Watcher | None:
    if args.signals == "redis":
        return RedisWatcher(args.redis_url, args.redis_channel)
    if args.signals == "nats":
        return NatsWatcher(args.nats_url, args.nats_subject_prefix)
    return None


async def run(args: argparse.Namespace) -> dict[str, Any]:
    provider = tracer_provider(args.otlp_endpoint, args.service_name)
    agent, counter = build_agent(provider, args.max_calls, args.tool_delay)
    watcher = make_watcher(args)
    if watcher is not None:
        await watcher.start()  # subscribed before the first span leaves: no signal missed

    signal: dict[str, Any] | None = None
    cancelled = False
    reason = ""
    tracer = provider.get_tracer("stop-a-looping-agent")
    try:
        # Our own root span, so the trace id is known before the agent starts.
        with tracer.start_as_current_span("stop-a-looping-agent") as root:
            trace_id = format(root.get_span_context().trace_id, "032x")
            print(f"agent: trace_id {trace_id}", file=sys.stderr)
            run_task = asyncio.create_task(
                agent.run(
                    f"Fetch {URL}",
                    usage_limits=UsageLimits(request_limit=args.max_calls + 5),
                )
            )
            waiting = {run_task}
            watch_task = None
            if watcher is not None:
                watch_task = asyncio.create_task(watcher.kill_signal(trace_id))
                waiting.add(watch_task)
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)

            if watch_task is not None and watch_task.done() and not run_task.done():
                signal = watch_task.result()  # a watcher that failed raises here
                run_task.cancel()  # the kill: CancelledError at the agent's current await
                try:
                    await run_task
                except asyncio.CancelledError:
                    cancelled = True
                reason = signal.get("message") or f"kill signal {signal.get('id')}"
                print(f"agent: killed by loopwatch: {reason}", file=sys.stderr)
            else:
                if watch_task is not None:
                    watch_task.cancel()
                result = run_task.result()
                reason = f"finished without a kill signal: {result.output}"
    finally:
        if watcher is not None:
            await watcher.close()
        # Export what is still queued (the root span, the cancelled agent span).
        provider.force_flush(timeout_millis=10_000)
        provider.shutdown()

    return {
        "trace_id": trace_id,
        "tool_calls": counter["tool_calls"],
        "cancelled": cancelled,
        "reason": reason,
        "signal": signal,
    }


def main() -> None:
    args = parse_args()
    outcome = asyncio.run(run(args))
    print(json.dumps(outcome))


if __name__ == "__main__":
    main()
