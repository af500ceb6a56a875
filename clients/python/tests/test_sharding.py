"""Unit tests of loopwatch.sharding: the hash ring and the sharded span exporter (no server)."""

from __future__ import annotations

import hashlib
import random
import threading
from typing import Sequence

import pytest
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loopwatch.sharding import HashRing, TraceIdShardedSpanExporter, ring_position, trace_id_key

NAMES = ["http://127.0.0.1:4317", "http://127.0.0.1:4417", "http://127.0.0.1:4517"]


class Recorder(SpanExporter):
    """Records what it is asked to export; answers `result` (or raises `raises`)."""

    def __init__(self, result: SpanExportResult = SpanExportResult.SUCCESS, raises: bool = False) -> None:
        self.batches: list[list[ReadableSpan]] = []
        self.result, self.raises = result, raises
        self.flushed: list[int] = []
        self.shutdowns = 0
        self.threads: set[str] = set()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.threads.add(threading.current_thread().name)
        self.batches.append(list(spans))
        if self.raises:
            raise RuntimeError("exporter broke")
        return self.result

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        self.flushed.append(timeout_millis)
        return True

    def shutdown(self) -> None:
        self.shutdowns += 1

    @property
    def spans(self) -> list[ReadableSpan]:
        return [span for batch in self.batches for span in batch]


def keys(count: int, seed: int = 7) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.getrandbits(128).to_bytes(16, "big") for _ in range(count)]


def make_spans(traces: int, per_trace: int, resource: dict | None = None, attrs=None) -> list[ReadableSpan]:
    """`traces` traces of `per_trace` spans each, their spans interleaved in end order."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create(resource or {"service.name": "t"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("test")
    roots = [tracer.start_span(f"invoke_agent r{t}") for t in range(traces)]
    for step in range(per_trace - 1):
        for t, root in enumerate(roots):
            ctx = trace.set_span_in_context(root)
            span = tracer.start_span(f"execute_tool s{step}", context=ctx, attributes=attrs(t) if attrs else None)
            span.end()
    for root in roots:
        root.end()
    return list(memory.get_finished_spans())


def brute_force_owner(names: list[str], points: int, key: bytes) -> str:
    """The documented function, written out directly: the first point at or after the key."""
    position = int.from_bytes(hashlib.sha256(key).digest()[:8], "big")
    ring = sorted((int.from_bytes(hashlib.sha256(f"{n}#{i}".encode()).digest()[:8], "big"), n)
                  for n in names for i in range(points))
    for point, name in ring:
        if point >= position:
            return name
    return ring[0][1]


def test_ring_follows_the_documented_function():
    ring = HashRing(NAMES, points_per_shard=16)
    for key in keys(300):
        assert ring.shard_name(key) == brute_force_owner(NAMES, 16, key)


def test_ring_is_pinned():
    # Agents on different machines and versions must agree: these owners may never change.
    ring = HashRing(NAMES)
    got = [ring.shard_name(bytes([i]) * 16).rsplit(":", 1)[1] for i in range(10)]
    assert got == ["4317", "4517", "4317", "4517", "4317", "4517", "4317", "4517", "4417", "4317"], got
    assert ring_position(b"") == 0xE3B0C44298FC1C14  # SHA-256 of nothing, first 8 bytes


def test_ring_ignores_the_order_of_names():
    a, b = HashRing(NAMES), HashRing(list(reversed(NAMES)))
    assert all(a.shard_name(k) == b.shard_name(k) for k in keys(2000))


def test_ring_spreads_trace_ids_evenly():
    ring = HashRing(NAMES)
    counts = {name: 0 for name in NAMES}
    sample = keys(30000)
    for key in sample:
        counts[ring.shard_name(key)] += 1
    shares = sorted(count / len(sample) for count in counts.values())
    assert shares[0] > 0.29 and shares[-1] < 0.38, shares


def test_adding_a_shard_moves_about_one_in_n_plus_one_runs_all_to_the_new_shard():
    before, after = HashRing(NAMES), HashRing(NAMES + ["http://127.0.0.1:4617"])
    sample = keys(20000)
    moved = [k for k in sample if before.shard_name(k) != after.shard_name(k)]
    assert 0.19 < len(moved) / len(sample) < 0.31, len(moved) / len(sample)
    assert {after.shard_name(k) for k in moved} == {"http://127.0.0.1:4617"}


def test_removing_a_shard_moves_only_its_runs():
    before, after = HashRing(NAMES), HashRing(NAMES[:2])
    for key in keys(5000):
        if before.shard_name(key) != NAMES[2]:
            assert after.shard_name(key) == before.shard_name(key)


@pytest.mark.parametrize("names,points", [([], 4), (["a", "a"], 4), (["a", ""], 4), (["a"], 0)])
def test_ring_refuses_bad_shards(names, points):
    with pytest.raises(ValueError):
        HashRing(names, points)


def test_trace_id_key_forms():
    tid = 0x0AF7651916CD43DD8448EB211C80319C
    assert trace_id_key(tid) == bytes.fromhex("0af7651916cd43dd8448eb211c80319c")
    assert trace_id_key("0AF7651916CD43DD8448EB211C80319C") == trace_id_key(tid)
    assert trace_id_key(trace_id_key(tid)) == trace_id_key(tid)
    for bad in (b"\x01" * 8, "abc"):
        with pytest.raises(ValueError):
            trace_id_key(bad)


def test_split_batches_keep_whole_traces_and_their_order():
    recorders = {name: Recorder() for name in NAMES}
    exporter = TraceIdShardedSpanExporter(recorders)
    spans = make_spans(traces=40, per_trace=5)
    assert exporter.export(spans) is SpanExportResult.SUCCESS
    owner: dict[int, str] = {}
    for name, recorder in recorders.items():
        assert len(recorder.batches) <= 1  # one call per shard per batch
        got = recorder.spans
        assert got == [s for s in spans if exporter.shard_of(s) == name]  # batch order kept
        for span in got:
            assert owner.setdefault(span.context.trace_id, name) == name
            assert exporter.shard_for_trace_id(span.context.trace_id) == name
    assert len(owner) == 40
    assert sum(len(r.spans) for r in recorders.values()) == len(spans) == 200
    assert all(r.batches for r in recorders.values()), "40 traces should reach all 3 shards"
    exporter.shutdown()


def test_sequence_of_exporters_is_named_by_position():
    exporter = TraceIdShardedSpanExporter([Recorder(), Recorder()])
    assert exporter.names == ("shard-0", "shard-1")
    exporter.shutdown()


def test_a_failed_shard_fails_the_export_but_the_others_still_get_their_spans():
    for broken in (Recorder(SpanExportResult.FAILURE), Recorder(raises=True)):
        good = [Recorder(), Recorder()]
        exporter = TraceIdShardedSpanExporter({NAMES[0]: good[0], NAMES[1]: broken, NAMES[2]: good[1]})
        spans = make_spans(traces=30, per_trace=2)
        assert exporter.export(spans) is SpanExportResult.FAILURE
        assert broken.spans and good[0].spans and good[1].spans
        assert len(broken.spans) + len(good[0].spans) + len(good[1].spans) == 60
        exporter.shutdown()


def test_export_of_nothing_succeeds_and_only_one_shard_exports_inline():
    recorders = [Recorder(), Recorder(), Recorder()]
    exporter = TraceIdShardedSpanExporter(recorders)
    assert exporter.export([]) is SpanExportResult.SUCCESS
    assert not any(r.batches for r in recorders)
    one_trace = make_spans(traces=1, per_trace=4)
    assert exporter.export(one_trace) is SpanExportResult.SUCCESS
    used = [r for r in recorders if r.batches]
    assert len(used) == 1 and used[0].threads == {threading.current_thread().name}
    exporter.shutdown()


def test_flush_and_shutdown_fan_out():
    recorders = [Recorder(), Recorder(), Recorder()]
    exporter = TraceIdShardedSpanExporter(recorders)
    assert exporter.force_flush(1234) is True
    assert [r.flushed for r in recorders] == [[1234]] * 3
    exporter.shutdown()
    exporter.shutdown()  # idempotent
    assert [r.shutdowns for r in recorders] == [1, 1, 1]
    assert exporter.export(make_spans(1, 1)) is SpanExportResult.FAILURE
    assert exporter.force_flush(5) is True and [r.flushed for r in recorders] == [[1234, 5]] * 3


def test_routing_attribute_keeps_a_session_of_several_traces_on_one_shard():
    recorders = {name: Recorder() for name in NAMES}
    exporter = TraceIdShardedSpanExporter(recorders, routing_attribute="session.id")
    # 60 traces, 3 per session (on the tool spans), roots without the attribute
    spans = make_spans(traces=60, per_trace=3, attrs=lambda t: {"session.id": f"session-{t // 3}"})
    assert exporter.export(spans) is SpanExportResult.SUCCESS
    where: dict[str, set[str]] = {}
    for name, recorder in recorders.items():
        for span in recorder.spans:
            session = (span.attributes or {}).get("session.id")
            if session is None:  # a root: routed by its trace id
                assert name == exporter.shard_for_trace_id(span.context.trace_id)
            else:
                where.setdefault(session, set()).add(name)
                assert name == exporter.ring.shard_name(session.encode())
    assert len(where) == 20 and all(len(names) == 1 for names in where.values())
    # by trace id alone, some session would have been split over several shards
    by_trace = TraceIdShardedSpanExporter({n: Recorder() for n in NAMES})
    split = {s: {by_trace.shard_of(x) for x in spans if (x.attributes or {}).get("session.id") == s} for s in where}
    assert any(len(names) > 1 for names in split.values())
    exporter.shutdown()
    by_trace.shutdown()


def test_routing_attribute_on_the_resource_and_fallbacks():
    exporter = TraceIdShardedSpanExporter([Recorder()], routing_attribute="session.id")
    on_resource = make_spans(1, 2, resource={"service.name": "t", "session.id": "conv-9"})
    assert {exporter.routing_key(s) for s in on_resource} == {b"conv-9"}
    # span attribute before resource attribute
    both = make_spans(1, 2, resource={"session.id": "res"}, attrs=lambda t: {"session.id": "span"})
    assert [exporter.routing_key(s) for s in both] == [b"span", b"res"]  # tool span, then root
    # not a string, or empty: the trace id (as loopwatch keys such runs by trace)
    for value in (42, ""):
        spans = make_spans(1, 2, attrs=lambda t: {"session.id": value})
        assert all(exporter.routing_key(s) == trace_id_key(s.context.trace_id) for s in spans)
    exporter.shutdown()


def test_from_endpoints_builds_one_exporter_per_endpoint():
    built: list[dict] = []

    def factory(**kwargs):
        built.append(kwargs)
        return Recorder()

    exporter = TraceIdShardedSpanExporter.from_endpoints(NAMES, exporter_factory=factory, insecure=True)
    assert exporter.names == tuple(NAMES)
    assert built == [{"endpoint": n, "insecure": True} for n in NAMES]
    exporter.shutdown()
    with pytest.raises(ValueError):
        TraceIdShardedSpanExporter.from_endpoints([NAMES[0], NAMES[0]], exporter_factory=factory)
    with pytest.raises(ValueError):
        TraceIdShardedSpanExporter.from_endpoints([], exporter_factory=factory)


def test_from_endpoints_defaults_to_the_otlp_grpc_exporter():
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    exporter = TraceIdShardedSpanExporter.from_endpoints(NAMES[:2], insecure=True)
    assert all(isinstance(e, OTLPSpanExporter) for e in exporter.exporters)
    exporter.shutdown()
