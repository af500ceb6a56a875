"""Spread runs over several loopwatch gateways: a span exporter sharded by trace id.

loopwatch detects loops inside one run, so every span of a run must reach the same
loopwatch. Without an OpenTelemetry Collector (whose `loadbalancing` exporter does this with
`routing_key: traceID`), put `TraceIdShardedSpanExporter` in the agent's tracer provider:

    from loopwatch.sharding import TraceIdShardedSpanExporter
    exporter = TraceIdShardedSpanExporter.from_endpoints(
        ["http://10.0.0.1:4317", "http://10.0.0.2:4317", "http://10.0.0.3:4317"])
    loopwatch.instrument(exporter=exporter)

The routing function (stable across processes, machines and Python versions):

- The *routing key* of a span is its trace id as 16 big-endian bytes (the OTLP wire form).
  With `routing_attribute` (loopwatch's `detection.run_key_attribute`) it is instead the
  UTF-8 bytes of that attribute's value when the span, else its resource, carries it as a
  non-empty string, exactly as loopwatch keys its runs (`src/engine/mod.rs`, `run_key`);
  spans without it fall back to the trace id, as loopwatch does.
- The *position* of a byte string is the first 8 bytes of its SHA-256 digest read as a
  big-endian unsigned 64-bit integer.
- Each shard, named by a string (its endpoint for `from_endpoints`), owns
  `points_per_shard` points of a ring: the positions of `"<name>#<i>"` for i in
  0..points_per_shard-1.
- A span goes to the shard owning the first point at or after its key's position, wrapping
  round to the lowest point (ties between points broken by shard name).

This is consistent hashing, as the Collector's `loadbalancing` exporter uses: adding an
N+1-th shard moves only the keys now falling just before one of its points, about 1/(N+1)
of the runs, all of them to the new shard; removing one moves only that shard's runs. The
ring depends on the shard names, not their order, so name shards by something that stays
put (the endpoint). Runs already under way when a shard is added or removed are split
between two gateways, each seeing part of the run: change the set between runs, or accept
that those runs' loops may be missed or detected late.
"""

from __future__ import annotations

import bisect
import hashlib
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable, Mapping, Sequence

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

__all__ = [
    "DEFAULT_POINTS_PER_SHARD",
    "HashRing",
    "TraceIdShardedSpanExporter",
    "ring_position",
    "trace_id_key",
]

_log = logging.getLogger(__name__)

DEFAULT_POINTS_PER_SHARD = 256
"""Ring points per shard. With 256, the busiest of 3 shards gets about 1.05x its fair share of
runs (median over 20 sets of 3 endpoint names; at most 1.08x); with 128, 1.08x (at most 1.12x)."""


def ring_position(data: bytes) -> int:
    """The ring position of `data`: its SHA-256 digest's first 8 bytes, big-endian (0..2**64-1)."""
    return int.from_bytes(hashlib.sha256(data).digest()[:8], "big")


class HashRing:
    """A consistent hash ring over named shards (see the module docstring for the function).

    Args:
        names: the shards' names, each a non-empty distinct string; their order does not
            matter to the routing, only to the indices `shard_index` returns.
        points_per_shard: ring points per shard, >= 1; more points spread keys more evenly.

    Raises:
        ValueError: no names, an empty or repeated name, or `points_per_shard` < 1.
    """

    def __init__(self, names: Sequence[str], points_per_shard: int = DEFAULT_POINTS_PER_SHARD) -> None:
        if not names:
            raise ValueError("HashRing needs at least one shard")
        if points_per_shard < 1:
            raise ValueError(f"points_per_shard must be >= 1, not {points_per_shard}")
        seen: set[str] = set()
        for name in names:
            if not isinstance(name, str) or not name:
                raise ValueError(f"shard names must be non-empty strings, not {name!r}")
            if name in seen:
                raise ValueError(f"shard name {name!r} given twice")
            seen.add(name)
        self.names: tuple[str, ...] = tuple(names)
        points = sorted(
            (ring_position(f"{name}#{i}".encode()), name, index)
            for index, name in enumerate(self.names)
            for i in range(points_per_shard)
        )
        self._positions = [position for position, _, _ in points]
        self._owners = [index for _, _, index in points]

    def shard_index(self, key: bytes) -> int:
        """Index (into `names`) of the shard that owns `key`."""
        at = bisect.bisect_left(self._positions, ring_position(key))
        return self._owners[at if at < len(self._owners) else 0]

    def shard_name(self, key: bytes) -> str:
        """Name of the shard that owns `key`."""
        return self.names[self.shard_index(key)]


def trace_id_key(trace_id: int | bytes | str) -> bytes:
    """The routing key of a trace id: 16 big-endian bytes.

    Accepts the SDK's int, the 16 wire bytes, or 32 hex characters (either case).

    Raises:
        ValueError: bytes not 16 long, or a string that is not 32 hex characters.
    """
    if isinstance(trace_id, int):
        return trace_id.to_bytes(16, "big")
    if isinstance(trace_id, bytes):
        if len(trace_id) != 16:
            raise ValueError(f"a trace id is 16 bytes, not {len(trace_id)}")
        return trace_id
    if len(trace_id) != 32:
        raise ValueError(f"a hex trace id is 32 characters, not {len(trace_id)}")
    return bytes.fromhex(trace_id)


class TraceIdShardedSpanExporter(SpanExporter):
    """A `SpanExporter` that sends each run's spans to one of several exporters.

    Each span goes to the exporter chosen by `HashRing` from its routing key (the trace id,
    or `routing_attribute`'s value; see the module docstring). A batch is split per shard,
    keeping the spans' order within each shard, and the shards are exported concurrently.

    Args:
        exporters: the shards: a mapping of stable name -> exporter (recommended: the
            endpoint as name), or a sequence of exporters, named `"shard-0"`, `"shard-1"`, …
            by position (then only appending keeps the other shards' runs in place).
        routing_attribute: route by this string attribute (span, then resource) instead of
            the trace id, falling back to the trace id where it is absent or empty; set it to
            loopwatch's `detection.run_key_attribute` when one run spans several traces.
        points_per_shard: ring points per shard (`HashRing`).

    Raises:
        ValueError: no exporters, or `HashRing`'s errors.
    """

    def __init__(
        self,
        exporters: Mapping[str, SpanExporter] | Sequence[SpanExporter],
        *,
        routing_attribute: str | None = None,
        points_per_shard: int = DEFAULT_POINTS_PER_SHARD,
    ) -> None:
        if isinstance(exporters, Mapping):
            named = list(exporters.items())
        else:
            named = [(f"shard-{i}", exporter) for i, exporter in enumerate(exporters)]
        if not named:
            raise ValueError("TraceIdShardedSpanExporter needs at least one exporter")
        self.ring = HashRing([name for name, _ in named], points_per_shard)
        self.exporters: tuple[SpanExporter, ...] = tuple(exporter for _, exporter in named)
        self.routing_attribute = routing_attribute or None
        self._pool = ThreadPoolExecutor(max_workers=len(named), thread_name_prefix="loopwatch-shard")
        self._lock = threading.Lock()
        self._shut_down = False

    @classmethod
    def from_endpoints(
        cls,
        endpoints: Iterable[str],
        *,
        routing_attribute: str | None = None,
        points_per_shard: int = DEFAULT_POINTS_PER_SHARD,
        exporter_factory: Callable[..., SpanExporter] | None = None,
        **exporter_kwargs: Any,
    ) -> TraceIdShardedSpanExporter:
        """One OTLP/gRPC exporter per endpoint, each shard named by its endpoint.

        Args:
            endpoints: OTLP/gRPC endpoints of the loopwatch gateways, e.g.
                `http://10.0.0.1:4317` (`http://` = plaintext); the strings name the shards,
                so write each the same way on every agent.
            routing_attribute, points_per_shard: as for the constructor.
            exporter_factory: builds an exporter from `endpoint=` and `exporter_kwargs`
                (default: the SDK's `OTLPSpanExporter`).
            exporter_kwargs: passed to each exporter (`headers`, `insecure`, `timeout`, …).

        Raises:
            ValueError: no endpoints, or an endpoint given twice.
        """
        if exporter_factory is None:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

            exporter_factory = OTLPSpanExporter
        names = list(endpoints)
        if len(set(names)) != len(names):
            raise ValueError(f"an endpoint is given twice: {names}")
        exporters = {name: exporter_factory(endpoint=name, **exporter_kwargs) for name in names}
        return cls(exporters, routing_attribute=routing_attribute, points_per_shard=points_per_shard)

    @property
    def names(self) -> tuple[str, ...]:
        """The shards' names, in the order of `exporters`."""
        return self.ring.names

    def routing_key(self, span: ReadableSpan) -> bytes:
        """The bytes `span` is routed by: `routing_attribute`'s value, else its trace id."""
        if self.routing_attribute is not None:
            value = (span.attributes or {}).get(self.routing_attribute)
            if not isinstance(value, str) and span.resource is not None:
                value = span.resource.attributes.get(self.routing_attribute)
            if isinstance(value, str) and value:
                return value.encode()
        context = span.get_span_context()
        trace_id = context.trace_id if context is not None else 0
        return trace_id_key(trace_id)

    def shard_of(self, span: ReadableSpan) -> str:
        """Name of the shard `span` goes to."""
        return self.ring.shard_name(self.routing_key(span))

    def shard_for_trace_id(self, trace_id: int | bytes | str) -> str:
        """Name of the shard a trace's spans go to (by trace id; see `trace_id_key`)."""
        return self.ring.shard_name(trace_id_key(trace_id))

    def split(self, spans: Sequence[ReadableSpan]) -> dict[int, list[ReadableSpan]]:
        """The batch per shard index (only shards with spans), each in the batch's order."""
        batches: dict[int, list[ReadableSpan]] = {}
        owners: dict[bytes, int] = {}  # a batch holds many spans of few runs: hash each key once
        for span in spans:
            key = self.routing_key(span)
            index = owners.get(key)
            if index is None:
                index = owners[key] = self.ring.shard_index(key)
            batches.setdefault(index, []).append(span)
        return batches

    def _export_one(self, index: int, batch: list[ReadableSpan]) -> SpanExportResult:
        try:
            return self.exporters[index].export(batch)
        except Exception:  # an exporter that raises fails its shard, not the others
            _log.exception("loopwatch: exporting %d spans to shard %s raised", len(batch), self.names[index])
            return SpanExportResult.FAILURE

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Exports each shard's part of `spans` (concurrently when several shards have spans).

        Returns:
            `SUCCESS` when every shard that got spans succeeded (or there were none);
            `FAILURE` when any failed or raised (the others' spans were still sent), or
            after `shutdown`.
        """
        if self._shut_down:
            return SpanExportResult.FAILURE
        batches = self.split(spans)
        if len(batches) <= 1:
            results = [self._export_one(index, batch) for index, batch in batches.items()]
        else:
            futures = [self._pool.submit(self._export_one, index, batch) for index, batch in batches.items()]
            results = [future.result() for future in futures]
        failed = [
            self.names[index]
            for index, result in zip(batches, results)
            if result is not SpanExportResult.SUCCESS
        ]
        if failed:
            _log.warning("loopwatch: span export failed for shard(s) %s", ", ".join(failed))
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Flushes every shard's exporter (each given `timeout_millis`); true if all did."""
        if self._shut_down:
            return all(bool(exporter.force_flush(timeout_millis)) for exporter in self.exporters)
        futures = [self._pool.submit(exporter.force_flush, timeout_millis) for exporter in self.exporters]
        return all(bool(future.result()) for future in futures)

    def shutdown(self) -> None:
        """Shuts every shard's exporter down (concurrently), then the export threads.

        Idempotent. An exporter whose shutdown raises is logged; the others still shut down.
        """
        with self._lock:
            if self._shut_down:
                return
            self._shut_down = True

        def stop(index: int) -> None:
            try:
                self.exporters[index].shutdown()
            except Exception:
                _log.exception("loopwatch: shutting down shard %s raised", self.names[index])

        for future in [self._pool.submit(stop, i) for i in range(len(self.exporters))]:
            future.result()
        self._pool.shutdown(wait=True)
