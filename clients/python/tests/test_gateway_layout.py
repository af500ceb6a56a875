"""The gateway layout, end to end: runs sharded over 3 loopwatch gateways detect exactly what
one loopwatch detects.

No OpenTelemetry Collector build is available to these tests, so the load balancer is the
OpenTelemetry Python SDK's own OTLP/gRPC exporters sharded by trace id
(`loopwatch.sharding.TraceIdShardedSpanExporter`, the same consistent-hash routing as the
Collector's `loadbalancing` exporter with `routing_key: traceID`). Every loopwatch is the real
binary; every span goes through the real SDK exporters (or, for the recorded corpus, real
OTLP/gRPC Export calls). For each instance the runs and their detections are read from
`GET /v1/runs`; the union over the gateways must equal the single instance's answer, and each
run must be held by exactly one gateway, the one the ring names.
"""

from __future__ import annotations

import json
import random
import urllib.parse
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import grpc
import pytest
from conftest import need
from lwserver import REPO, LoopwatchServer, loopwatch_bin

from loopwatch.sharding import HashRing, TraceIdShardedSpanExporter

GATEWAYS = 3
CORPUS = REPO / "tests" / "fixtures" / "corpus"
SESSION_CONFIG = '[detection]\nrun_key = "attribute"\nrun_key_attribute = "session.id"\n'


@contextmanager
def cluster(config: str = "") -> Iterator[tuple[LoopwatchServer, list[LoopwatchServer]]]:
    """One single loopwatch and `GATEWAYS` gateway loopwatches, all with `config`."""
    need(loopwatch_bin().exists(), f"loopwatch binary missing at {loopwatch_bin()} (set LOOPWATCH_BIN)")
    with ExitStack() as stack:
        servers = [stack.enter_context(LoopwatchServer(config)) for _ in range(GATEWAYS + 1)]
        yield servers[0], servers[1:]


Run = tuple[int, tuple[tuple[Any, ...], ...]]


def runs_of(server: LoopwatchServer) -> dict[str, Run]:
    """run_key -> (tool calls, detections as sorted tuples) from `GET /v1/runs`."""
    answer = server.get("/v1/runs?limit=1000000")
    out: dict[str, Run] = {}
    for run in answer["data"]:  # type: ignore[index]
        detections = tuple(sorted(
            (d["trace_id"], d["span_id"], d["profile"], d["pattern"], tuple(d["tools"]), d["count"],
             d["severity"], d["occurrence"], d["call"], d["response"])
            for d in run["detections"]
        ))
        assert run["run_key"] not in out, f"{run['run_key']} listed twice"
        out[run["run_key"]] = (run["tool_calls"], detections)
    return out


def assert_same_answer(
    single: LoopwatchServer, gateways: list[LoopwatchServer], owner: Callable[[str], str]
) -> dict[str, Run]:
    """The union over `gateways` equals `single`'s runs; each run on `owner(run_key)` only."""
    expected = runs_of(single)
    union: dict[str, Run] = {}
    for gateway in gateways:
        held = runs_of(gateway)
        assert held, f"gateway {gateway.grpc_endpoint} got no run"
        for key, run in held.items():
            assert key not in union, f"run {key} is on two gateways"
            assert owner(key) == gateway.grpc_endpoint, f"run {key} on {gateway.grpc_endpoint}, not {owner(key)}"
            union[key] = run
    missing, extra = expected.keys() - union.keys(), union.keys() - expected.keys()
    assert not missing and not extra, f"missing on the gateways: {sorted(missing)[:5]}; extra: {sorted(extra)[:5]}"
    differ = [key for key in expected if expected[key] != union[key]]
    assert not differ, "\n".join(f"{k}: single {expected[k]} / gateways {union[k]}" for k in differ[:5])
    return expected


# --- runs written with the OpenTelemetry SDK ---------------------------------------------

Call = tuple[str, dict[str, Any], str]  # tool name, arguments, result


def agent_run(kind: str, rng: random.Random) -> list[Call]:
    """The tool calls of one scripted agent run of `kind`, after a short clean prefix."""
    n = rng.randrange(1000)
    prefix: list[Call] = [("search", {"query": f"topic {n} part {i}"}, f"{i + 1} hits for {n}") for i in range(rng.randrange(3))]
    if kind == "clean":
        body = [("search", {"query": f"question {n}/{i}"}, f"answer {n}/{i}") for i in range(rng.randrange(6, 12))]
    elif kind == "repeated_call":  # the same call, new results each time (polling a job that never ends)
        body = [("check_status", {"job": str(n)}, f"running, {i}s elapsed") for i in range(rng.randrange(10, 13))]
    elif kind == "repeated_result":  # the same call failing the same way
        body = [("fetch_url", {"url": f"https://example.com/{n}"}, "Error: connection refused")] * rng.randrange(6, 9)
    elif kind == "alternating":  # A-B-A-B; the results change (else repeated_result fires first)
        body = [
            ("read_file", {"path": f"src/m{n}.py"}, f"revision {i}") if i % 2 == 0 else ("grep", {"pattern": "TODO"}, f"{i} matches")
            for i in range(rng.randrange(6, 13))
        ]
    elif kind == "cycle":  # A-B-C repeated, the results changing
        abc = [("list_dir", {"path": "."}, "entries"), ("read_file", {"path": "a"}, "text"), ("run_tests", {}, "failed")]
        body = [(tool, args, f"{result} {i}") for i in range(rng.randrange(3, 7)) for tool, args, result in abc]
    elif kind == "same_outcome":  # different arguments, the same outcome
        body = [("lookup_user", {"user_id": f"u-{n}-{i}"}, "Error: user not found") for i in range(rng.randrange(6, 13))]
    else:
        raise ValueError(kind)
    return prefix + body


KINDS = ["clean", "repeated_call", "repeated_result", "alternating", "cycle", "same_outcome"]


def emit_run(tracer, calls: list[Call], agent: str, attributes: dict[str, str] | None = None) -> int:
    """One `invoke_agent` root and an `execute_tool` span per call (GenAI conventions); its trace id."""
    from opentelemetry import trace

    attrs = dict(attributes or {})
    with tracer.start_as_current_span(
        f"invoke_agent {agent}", attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent, **attrs}
    ) as root:
        for i, (tool, arguments, result) in enumerate(calls):
            with tracer.start_as_current_span(
                f"execute_tool {tool}",
                kind=trace.SpanKind.INTERNAL,
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": tool,
                    "gen_ai.tool.call.id": f"call_{i}",
                    "gen_ai.tool.call.arguments": json.dumps(arguments),
                    "gen_ai.tool.call.result": result,
                    **attrs,
                },
            ):
                pass
        return root.get_span_context().trace_id


@contextmanager
def provider_to(single: LoopwatchServer, sharded: TraceIdShardedSpanExporter):
    """A tracer provider whose every span goes to `single` and through `sharded`."""
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": "gateway-layout"}))
    for exporter in (OTLPSpanExporter(endpoint=single.grpc_endpoint, insecure=True), sharded):
        # a queue that holds every span of the test, so none is dropped
        provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=100_000, schedule_delay_millis=50))
    try:
        yield provider
        assert provider.force_flush(60_000), "the SDK could not flush every span"
    finally:
        provider.shutdown()


def test_sdk_runs_sharded_by_trace_id_detect_what_one_instance_detects():
    rng = random.Random(33)
    with cluster() as (single, gateways):
        sharded = TraceIdShardedSpanExporter.from_endpoints([g.grpc_endpoint for g in gateways], insecure=True)
        made: dict[str, tuple[str, int]] = {}  # trace id -> (kind, tool calls)
        with provider_to(single, sharded) as provider:
            tracer = provider.get_tracer("gateway-layout")
            for i in range(240):
                kind = KINDS[i % len(KINDS)]
                calls = agent_run(kind, rng)
                made[f"{emit_run(tracer, calls, f'agent-{i % 7}'):032x}"] = (kind, len(calls))
        answer = assert_same_answer(single, gateways, sharded.shard_for_trace_id)

        assert answer.keys() == made.keys()
        for key, (kind, calls) in made.items():
            assert answer[key][0] == calls, f"{kind} run {key}: {answer[key][0]} calls arrived of {calls}"
        patterns: dict[str, set[str]] = {kind: set() for kind in KINDS}
        for key, (kind, _) in made.items():
            patterns[kind] |= {d[3] for d in answer[key][1]}
        # each kind is detected as what it is (so the comparison above compares something)
        assert patterns["clean"] == set()
        assert "repeated_call" in patterns["repeated_call"]
        assert "repeated_result" in patterns["repeated_result"]
        assert "alternating_calls" in patterns["alternating"]
        assert "cycle" in patterns["cycle"]
        assert "repeated_outcome" in patterns["same_outcome"]
        kills = sum(1 for run in answer.values() if any(d[6] == "kill" for d in run[1]))
        assert kills >= 20, kills


def test_sessions_of_several_traces_routed_by_the_run_key_attribute():
    rng = random.Random(34)
    with cluster(SESSION_CONFIG) as (single, gateways):
        endpoints = [g.grpc_endpoint for g in gateways]
        sharded = TraceIdShardedSpanExporter.from_endpoints(endpoints, insecure=True, routing_attribute="session.id")
        sessions: dict[str, list[int]] = {}
        with provider_to(single, sharded) as provider:
            tracer = provider.get_tracer("gateway-layout")
            for i in range(60):
                session = f"session-{i}"
                calls = agent_run(KINDS[i % len(KINDS)], rng)
                turns = 3  # one trace per user turn, the loop continuing across them
                for t in range(turns):
                    part = calls[t * len(calls) // turns:(t + 1) * len(calls) // turns]
                    sessions.setdefault(session, []).append(emit_run(tracer, part, "chat-bot", {"session.id": session}))
        ring = HashRing(endpoints)
        answer = assert_same_answer(single, gateways, lambda key: ring.shard_name(key.encode()))
        assert answer.keys() == sessions.keys()
        # detections that need the whole session: 6 same failures split 2+2+2 over three traces
        kills = [key for key, run in answer.items() if any(d[6] == "kill" for d in run[1])]
        assert len(kills) >= 10, kills
        # routed by trace id instead, some sessions would have been split over gateways
        split = [s for s, traces in sessions.items() if len({sharded.shard_for_trace_id(t) for t in traces}) > 1]
        assert len(split) > 20, split


# --- the recorded corpus, split by trace id ---------------------------------------------

def split_request(request: Any, ring: HashRing) -> dict[str, Any]:
    """`request` (ExportTraceServiceRequest) split per shard by each span's trace id,
    resources and scopes copied, the spans' order kept."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    parts: dict[str, Any] = {}
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                part = parts.setdefault(ring.shard_name(span.trace_id), ExportTraceServiceRequest())
                if not part.resource_spans or part.resource_spans[-1].resource != resource_spans.resource:
                    rs = part.resource_spans.add()
                    rs.resource.CopyFrom(resource_spans.resource)
                    rs.schema_url = resource_spans.schema_url
                rs = part.resource_spans[-1]
                if not rs.scope_spans or rs.scope_spans[-1].scope != scope_spans.scope:
                    ss = rs.scope_spans.add()
                    ss.scope.CopyFrom(scope_spans.scope)
                    ss.schema_url = scope_spans.schema_url
                rs.scope_spans[-1].spans.append(span)
    return parts


def test_recorded_corpus_split_by_trace_id_detects_what_one_instance_detects():
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

    requests = sorted(CORPUS.rglob("req-*.pb"))
    need(len(requests) >= 100, f"the recorded corpus is missing under {CORPUS} ({len(requests)} requests)")
    with cluster() as (single, gateways):
        ring = HashRing([g.grpc_endpoint for g in gateways])
        channels = {s.grpc_endpoint: grpc.insecure_channel(urllib.parse.urlsplit(s.grpc_endpoint).netloc) for s in [single, *gateways]}
        try:
            stubs = {e: trace_service_pb2_grpc.TraceServiceStub(c) for e, c in channels.items()}
            spans = 0
            for path in requests:  # each run's requests in arrival order, runs one after another
                request = trace_service_pb2.ExportTraceServiceRequest.FromString(path.read_bytes())
                stubs[single.grpc_endpoint].Export(request, timeout=30)
                for endpoint, part in split_request(request, ring).items():
                    spans += sum(len(ss.spans) for rs in part.resource_spans for ss in rs.scope_spans)
                    stubs[endpoint].Export(part, timeout=30)
        finally:
            for channel in channels.values():
                channel.close()
        assert spans > 1000, spans
        answer = assert_same_answer(single, gateways, lambda key: ring.shard_name(bytes.fromhex(key)))
        assert len(answer) >= 100, len(answer)
        looping = [key for key, run in answer.items() if run[1]]
        assert len(looping) >= 40, len(looping)


@pytest.fixture(autouse=True)
def _no_stray_otel_env(monkeypatch):
    """The SDK exporters here are configured in code, not by the environment."""
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_HEADERS"):
        monkeypatch.delenv(name, raising=False)
