"""`instrument()`: OpenTelemetry tracing to loopwatch, timed so tool spans arrive promptly.

loopwatch only sees a tool call once its span has been exported. The SDK's
`BatchSpanProcessor` waits up to `OTEL_BSP_SCHEDULE_DELAY` (5000 ms by default) before it
exports, long enough for an agent to make dozens more calls. `instrument()` therefore
(1) lowers the batch delay to 50 ms unless you set one, and (2) adds
`ToolSpanFlushProcessor`, which flushes the batch as soon as a tool span ends and waits
(up to `flush_timeout_millis`) until loopwatch has acknowledged it. So by the time the
agent asks the model for its next step, loopwatch has the call, and the pre-execution check
and the signals reflect it.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from dataclasses import dataclass
from typing import Any, Mapping

from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from . import config
from .errors import ConfigError

log = logging.getLogger("loopwatch")

#: Batch delay used when neither the argument nor OTEL_BSP_SCHEDULE_DELAY sets one (ms).
DEFAULT_SCHEDULE_DELAY_MILLIS = 50

# Attribute values that mark a tool-call span, per convention loopwatch reads
# (README "What loopwatch reads"): key -> accepted values.
_TOOL_MARKERS: dict[str, tuple[str, ...]] = {
    "gen_ai.operation.name": ("execute_tool", "tool.execute"),
    "openinference.span.kind": ("TOOL",),
    "traceloop.span.kind": ("tool",),
    "langsmith.span.kind": ("tool",),
    "langfuse.observation.type": ("tool",),
}
_TOOL_SPAN_NAMES = ("execute_tool", "running tool", "ai.toolCall", "function_tool")


def is_tool_span(span: ReadableSpan) -> bool:
    """Whether `span` is a tool call in one of the conventions loopwatch reads (GenAI
    `execute_tool`, OpenInference `TOOL`, OpenLLMetry, LangSmith, Langfuse, pydantic-ai
    legacy `running tool`, Vercel `ai.toolCall`, LiveKit `function_tool`)."""
    attributes = span.attributes or {}
    for key, values in _TOOL_MARKERS.items():
        if attributes.get(key) in values:
            return True
    name = span.name or ""
    return any(name == n or name.startswith(n + " ") for n in _TOOL_SPAN_NAMES)


class ToolSpanFlushProcessor(SpanProcessor):
    """Flushes `target` when a tool span ends, and waits for the export.

    Add it to the provider *after* `target` (a `BatchSpanProcessor`), so the span is queued
    when the flush runs. The export runs on a helper thread; the thread that ended the span
    waits at most `timeout_millis` (not at all for a span whose `gen_ai.tool.call.decision`
    is `deny`: the run is over). While a flush is still running (loopwatch slow or down),
    later tool spans do not wait again, so a dead backend costs one timeout, not one per call.

    Args:
        target: the processor to flush.
        timeout_millis: longest wait per tool span, ms (0: do not wait, just start the flush).
    """

    def __init__(self, target: SpanProcessor, timeout_millis: int = 1000) -> None:
        self._target = target
        self._timeout = max(0, timeout_millis) / 1000
        self._requests: queue.SimpleQueue[threading.Event | None] = queue.SimpleQueue()
        self._inflight: threading.Event | None = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._work, name="loopwatch-flush", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        while True:
            done = self._requests.get()
            if done is None:
                return
            try:
                self._target.force_flush()
            except Exception:  # never let a flush failure kill the helper
                log.exception("loopwatch: flushing tool spans failed")
            finally:
                done.set()

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if not is_tool_span(span):
            return
        with self._lock:
            if self._inflight is not None and not self._inflight.is_set():
                return  # an earlier flush is still running: this span is queued behind it
            done = threading.Event()
            self._inflight = done
        self._requests.put(done)
        # A call loopwatch denied ends the run: no later check needs it, so do not wait.
        denied = (span.attributes or {}).get("gen_ai.tool.call.decision") == "deny"
        if self._timeout and not denied and not done.wait(self._timeout):
            log.warning("loopwatch: tool span not exported within %.0f ms", self._timeout * 1000)

    def shutdown(self) -> None:
        self._requests.put(None)
        self._thread.join(timeout=5)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True  # the target is flushed by the provider itself


@dataclass
class Instrumentation:
    """What `instrument()` set up.

    Attributes:
        tracer_provider: the SDK provider exporting to loopwatch.
        endpoint: the OTLP/gRPC endpoint spans go to (loopwatch's gRPC port by default,
            which also serves `Signals/Watch` and `Guard/Check`).
        service_name: the resource's `service.name`.
    """

    tracer_provider: TracerProvider
    endpoint: str
    service_name: str

    def tracer(self, name: str = "loopwatch") -> trace.Tracer:
        """A tracer of this provider."""
        return self.tracer_provider.get_tracer(name)

    def shutdown(self) -> None:
        """Exports what is queued and stops the provider (call once, at exit)."""
        self.tracer_provider.force_flush()
        self.tracer_provider.shutdown()


_current: Instrumentation | None = None


def current_instrumentation() -> Instrumentation | None:
    """The last `instrument()` result in this process, or None."""
    return _current


def _env_int(name: str) -> int | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be an integer (milliseconds), got {raw!r}") from None


def instrument(
    endpoint: str | None = None,
    service_name: str | None = None,
    *,
    headers: Mapping[str, str] | None = None,
    insecure: bool | None = None,
    resource_attributes: Mapping[str, Any] | None = None,
    schedule_delay_millis: int | None = None,
    flush_on_tool_end: bool = True,
    flush_timeout_millis: int = 1000,
    exporter: SpanExporter | None = None,
    set_global: bool = True,
) -> Instrumentation:
    """Sets up OpenTelemetry tracing to loopwatch (OTLP/gRPC) with prompt export of tool spans.

    Args:
        endpoint: OTLP/gRPC endpoint, e.g. `http://127.0.0.1:4317`. Default:
            `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `OTEL_EXPORTER_OTLP_ENDPOINT`, else
            `http://localhost:4317`.
        service_name: resource `service.name`. Default: `OTEL_SERVICE_NAME`, the
            `service.name` of `OTEL_RESOURCE_ATTRIBUTES`, else the SDK's `unknown_service`.
        headers: extra gRPC metadata on exports (default: `OTEL_EXPORTER_OTLP_HEADERS`,
            read by the exporter), e.g. loopwatch's `[receiver.auth]` token.
        insecure: plaintext gRPC. Default: the exporter's rule (`OTEL_EXPORTER_OTLP_INSECURE`,
            else plaintext for `http://`).
        resource_attributes: more resource attributes (merged over `OTEL_RESOURCE_ATTRIBUTES`).
        schedule_delay_millis: batch delay, ms. Default: `OTEL_BSP_SCHEDULE_DELAY`, else 50.
        flush_on_tool_end: add `ToolSpanFlushProcessor` (flush and wait when a tool span ends).
        flush_timeout_millis: longest wait of that flush per tool span, ms.
        exporter: a span exporter to use instead of the OTLP/gRPC one (tests, other backends).
        set_global: install the provider as the global OpenTelemetry tracer provider (which
            framework instrumentations use by default). The SDK allows this once per process.

    Returns:
        The `Instrumentation` (provider, endpoint, service name); also remembered as the
        default of `Guard`.

    Raises:
        ConfigError: `OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL` names a protocol other than
            `grpc`, or a delay variable is not an integer.
    """
    global _current
    for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        protocol = os.environ.get(name, "").strip()
        if protocol and protocol != "grpc":
            raise ConfigError(f"{name}={protocol!r}: loopwatch.instrument exports OTLP over gRPC only")
    target = config.otlp_endpoint(endpoint)
    attributes: dict[str, Any] = dict(resource_attributes or {})
    if service_name:
        attributes[SERVICE_NAME] = service_name
    resource = Resource.create(attributes)
    if exporter is None:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        kwargs: dict[str, Any] = {"endpoint": target}
        if headers is not None:
            kwargs["headers"] = dict(headers)
        if insecure is not None:
            kwargs["insecure"] = insecure
        exporter = OTLPSpanExporter(**kwargs)
    delay = schedule_delay_millis
    if delay is None:
        delay = _env_int("OTEL_BSP_SCHEDULE_DELAY")
    if delay is None:
        delay = DEFAULT_SCHEDULE_DELAY_MILLIS
    provider = TracerProvider(resource=resource)
    batch = BatchSpanProcessor(exporter, schedule_delay_millis=delay)
    provider.add_span_processor(batch)
    if flush_on_tool_end:
        provider.add_span_processor(ToolSpanFlushProcessor(batch, flush_timeout_millis))
    if set_global:
        trace.set_tracer_provider(provider)
    _current = Instrumentation(
        tracer_provider=provider,
        endpoint=target,
        service_name=str(resource.attributes.get(SERVICE_NAME, "")),
    )
    return _current
