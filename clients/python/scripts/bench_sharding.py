"""What routing costs an agent: CPU per span of TraceIdShardedSpanExporter.split, next to the
SDK's own OTLP protobuf encoding of the same spans (which every export pays anyway).

Usage: python scripts/bench_sharding.py [--traces 200] [--spans-per-trace 50] [--shards 3]

Needs the package installed (or PYTHONPATH=src). Prints two lines, microseconds per span,
each the best of 5 rounds. No network: the shards are exporters that drop what they get.
"""

from __future__ import annotations

import argparse
import time
from typing import Sequence

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loopwatch.sharding import TraceIdShardedSpanExporter


class Drop(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def tool_spans(traces: int, per_trace: int) -> list[ReadableSpan]:
    """`traces` runs of `per_trace` GenAI tool spans, interleaved as a busy agent host ends them."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("bench")
    roots = [tracer.start_span("invoke_agent bench") for _ in range(traces)]
    for step in range(per_trace):
        for root in roots:
            tracer.start_span(
                "execute_tool fetch_url",
                context=trace.set_span_in_context(root),
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": "fetch_url",
                    "gen_ai.tool.call.id": f"call_{step}",
                    "gen_ai.tool.call.arguments": '{"url":"https://example.com/a"}',
                    "gen_ai.tool.call.result": "Error: connection refused",
                },
            ).end()
    return list(memory.get_finished_spans())


def best_us_per_span(fn, spans: list[ReadableSpan], rounds: int = 5) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        fn(spans)
        best = min(best, time.perf_counter() - start)
    return best / len(spans) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=200)
    parser.add_argument("--spans-per-trace", type=int, default=50)
    parser.add_argument("--shards", type=int, default=3)
    args = parser.parse_args()
    spans = tool_spans(args.traces, args.spans_per_trace)
    exporter = TraceIdShardedSpanExporter({f"http://127.0.0.1:{4317 + i}": Drop() for i in range(args.shards)})
    print(f"split over {args.shards} shards: {best_us_per_span(exporter.split, spans):.2f} us per span")
    print(f"OTLP protobuf encoding:    {best_us_per_span(encode_spans, spans):.2f} us per span")
    exporter.shutdown()


if __name__ == "__main__":
    main()
