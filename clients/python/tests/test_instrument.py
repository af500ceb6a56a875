"""`instrument()`: OTEL_* conventions, batch timing, and the tool-span flush."""

from __future__ import annotations

import time

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import loopwatch
from loopwatch import config
from loopwatch.tracing import ToolSpanFlushProcessor


class SlowExporter(InMemorySpanExporter):
    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay

    def export(self, spans):
        time.sleep(self.delay)
        return super().export(spans)


def test_env_conventions(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-env")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "20000")
    exporter = InMemorySpanExporter()
    inst = loopwatch.instrument(exporter=exporter, set_global=False, flush_on_tool_end=False)
    assert inst.endpoint == "http://collector:4317" and inst.service_name == "from-env"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://traces:4317")
    assert config.otlp_endpoint() == "http://traces:4317"
    assert config.otlp_endpoint("http://explicit:1") == "http://explicit:1"
    # an explicit service name wins over the environment
    assert loopwatch.instrument(service_name="explicit", exporter=exporter, set_global=False).service_name == "explicit"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    with pytest.raises(loopwatch.ConfigError, match="gRPC only"):
        loopwatch.instrument(exporter=exporter, set_global=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "soon")
    with pytest.raises(loopwatch.ConfigError, match="OTEL_BSP_SCHEDULE_DELAY"):
        loopwatch.instrument(exporter=exporter, set_global=False)


def test_a_tool_span_is_exported_before_its_end_returns(monkeypatch):
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "60000")  # the batch alone would wait a minute
    exporter = SlowExporter(0.01)
    inst = loopwatch.instrument(exporter=exporter, set_global=False)
    tracer = inst.tracer()
    with tracer.start_as_current_span("chat model"):
        pass
    assert exporter.get_finished_spans() == ()  # not a tool span: left to the batch
    with tracer.start_as_current_span("execute_tool fetch", attributes={"gen_ai.operation.name": "execute_tool"}):
        pass
    assert [s.name for s in exporter.get_finished_spans()] == ["chat model", "execute_tool fetch"]
    inst.shutdown()


def test_a_slow_backend_costs_one_timeout_not_one_per_call():
    exporter = SlowExporter(0.5)
    inst = loopwatch.instrument(exporter=exporter, set_global=False, schedule_delay_millis=60000, flush_timeout_millis=50)
    tracer = inst.tracer()
    started = time.perf_counter()
    for _ in range(5):
        with tracer.start_as_current_span("execute_tool slow", attributes={"gen_ai.operation.name": "execute_tool"}):
            pass
    assert time.perf_counter() - started < 0.2  # ≈ one 50 ms wait, then no waits while it runs
    inst.shutdown()


@pytest.mark.parametrize(
    "name,attributes,tool",
    [
        ("execute_tool x", {}, True),
        ("x", {"gen_ai.operation.name": "execute_tool"}, True),
        ("x", {"openinference.span.kind": "TOOL"}, True),
        ("x", {"traceloop.span.kind": "tool"}, True),
        ("running tool", {}, True),
        ("chat gpt", {"gen_ai.operation.name": "chat"}, False),
        ("execute_toolbox", {}, False),
    ],
)
def test_tool_span_recognition(name, attributes, tool):
    class Span:
        pass

    span = Span()
    span.name, span.attributes = name, attributes
    assert loopwatch.is_tool_span(span) is tool


def test_flush_processor_without_wait_never_blocks():
    class Target:
        flushed = 0

        def force_flush(self, timeout_millis=None):
            Target.flushed += 1
            return True

    class Span:
        name, attributes = "execute_tool x", {}

    processor = ToolSpanFlushProcessor(Target(), timeout_millis=0)
    processor.on_end(Span())
    time.sleep(0.05)
    assert Target.flushed == 1
    processor.shutdown()
