"""`GrpcTransport`: `loopwatch.v1.Signals/Watch`, a server stream of signals."""

from __future__ import annotations

import threading

import grpc

from .. import config
from ..signal import Signal
from . import Transport


class GrpcTransport(Transport):
    """Watches signals over gRPC.

    The subscription is in force once loopwatch has sent the stream's response headers
    (it subscribes before answering), so `wait_ready` returning True means no signal
    published afterwards is missed while the stream lives.

    Args:
        endpoint: loopwatch's gRPC endpoint (default: see `config.grpc_endpoint`).
        bearer: admin token (`admin.auth_token`), sent as `authorization` metadata.
        service_name: only signals of this `service.name` ("" = all).
        trace_id: only signals of this trace ("" = all).
        action: only this action ("" = all).
    """

    name = "grpc"

    def __init__(
        self,
        endpoint: str | None = None,
        bearer: str | None = None,
        service_name: str = "",
        trace_id: str = "",
        action: str = "",
        **backoff: float,
    ) -> None:
        super().__init__(**backoff)
        self.endpoint = config.grpc_endpoint(endpoint)
        config.grpc_target(self.endpoint)  # ConfigError now rather than on the thread
        self._metadata = config.grpc_metadata(config.token(bearer))
        self._filters = {"service_name": service_name or "", "trace_id": trace_id or "", "action": action or ""}
        self._call: grpc.Future | None = None
        self._call_lock = threading.Lock()

    def _serve(self) -> None:
        from ..v1 import signals_pb2, signals_pb2_grpc

        channel = config.grpc_channel(self.endpoint)
        try:
            stub = signals_pb2_grpc.SignalsStub(channel)
            call = stub.Watch(
                signals_pb2.WatchRequest(**self._filters), metadata=self._metadata, wait_for_ready=True
            )
            with self._call_lock:
                if self._closing.is_set():
                    call.cancel()
                    return
                self._call = call
            try:
                call.initial_metadata()  # the headers: loopwatch has subscribed
            except grpc.RpcError as err:
                raise RuntimeError(f"Watch refused: {err.code().name}: {err.details()}") from None
            if not call.is_active():
                # An error status (UNAUTHENTICATED, INVALID_ARGUMENT) comes as trailers-only.
                raise RuntimeError(f"Watch refused: {call.code().name}: {call.details()}")
            self._subscribed()
            try:
                for message in call:
                    assert self._deliver is not None
                    self._deliver(Signal.from_proto(message))
            except grpc.RpcError as err:
                if self._closing.is_set() and err.code() == grpc.StatusCode.CANCELLED:
                    return
                raise RuntimeError(f"Watch: {err.code().name}: {err.details()}") from None
            raise RuntimeError("Watch stream ended (server shutting down?)")
        finally:
            with self._call_lock:
                self._call = None
            channel.close()

    def _cancel(self) -> None:
        with self._call_lock:
            if self._call is not None:
                self._call.cancel()
