"""Capture side: an OTLP/gRPC trace receiver that stores every export request.

Each request is written as ``req-NNNN.pb`` (the exact bytes the exporter sent, after gRPC
framing) and ``req-NNNN.json`` (OTLP/JSON: lowerCamelCase, hex trace/span ids, 64-bit
integers as decimal strings, enums as integers), numbered in arrival order.

Used in-process by the framework scripts (``Capture(outdir)`` + ``tracer_provider(...)``),
or standalone: ``python capture.py OUTDIR [PORT]`` records until interrupted.
"""
import base64
import json
import os
import sys
import threading
from concurrent import futures

import grpc
from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
ID_KEYS = {"traceId", "spanId", "parentSpanId"}


def _hex_ids(node):
    if isinstance(node, dict):
        for k, v in node.items():
            if k in ID_KEYS and isinstance(v, str):
                node[k] = base64.b64decode(v).hex()
            else:
                _hex_ids(v)
    elif isinstance(node, list):
        for v in node:
            _hex_ids(v)
    return node


def to_otlp_json(raw: bytes) -> str:
    request = trace_service_pb2.ExportTraceServiceRequest.FromString(raw)
    doc = MessageToDict(request, use_integers_for_enums=True)
    return json.dumps(_hex_ids(doc), indent=1, ensure_ascii=False) + "\n"


class Capture:
    """A gRPC server on 127.0.0.1 (ephemeral port) writing each request into ``outdir``."""

    def __init__(self, outdir, port=0):
        self.outdir = outdir
        os.makedirs(outdir, exist_ok=True)
        self.count = 0
        self.lock = threading.Lock()
        handler = grpc.method_handlers_generic_handler(
            "opentelemetry.proto.collector.trace.v1.TraceService",
            {"Export": grpc.unary_unary_rpc_method_handler(self._export)},  # raw bytes in and out
        )
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        self.server.add_generic_rpc_handlers((handler,))
        self.port = self.server.add_insecure_port(f"127.0.0.1:{port}")
        self.server.start()

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.port}"

    def _export(self, raw, _context):
        with self.lock:
            self.count += 1
            base = os.path.join(self.outdir, f"req-{self.count:04d}")
        with open(base + ".pb", "wb") as f:
            f.write(raw)
        with open(base + ".json", "w", encoding="utf-8") as f:
            f.write(to_otlp_json(raw))
        return trace_service_pb2.ExportTraceServiceResponse().SerializeToString()

    def stop(self):
        self.server.stop(grace=2).wait()


def tracer_provider(capture, service_name):
    """A global TracerProvider exporting with the standard OTLP/gRPC exporter behind a
    BatchSpanProcessor (the SDK's defaults, as a user would configure it)."""
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=capture.endpoint, insecure=True)))
    trace.set_tracer_provider(provider)
    return provider


if __name__ == "__main__":
    cap = Capture(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 4317)
    print(f"recording OTLP/gRPC on 127.0.0.1:{cap.port} into {sys.argv[1]}", flush=True)
    cap.server.wait_for_termination()
