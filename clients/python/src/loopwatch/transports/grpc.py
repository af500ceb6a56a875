"""`GrpcTransport`: `loopwatch.v1.Signals/Watch`, a server stream of signals."""

from __future__ import annotations

import threading

import grpc

from .. import config
from ..signal import Signal
from . import Transport

#: Response header loopwatch sends on a subscribed `Watch` stream (value "1").
SUBSCRIBED_HEADER = "loopwatch-subscribed"
#: Seconds to wait for the status of a `Watch` answered without that header.
STATUS_WAIT_S = 2.0


class GrpcTransport(Transport):
    """Watches signals over gRPC.

    The subscription is in force once loopwatch has sent the stream's response headers
    with `loopwatch-subscribed: 1` (it subscribes before answering), so `wait_ready` returning True means no signal
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
                headers = dict(call.initial_metadata() or ())
            except grpc.RpcError as err:
                raise RuntimeError(f"Watch refused: {err.code().name}: {err.details()}") from None
            if SUBSCRIBED_HEADER not in headers:
                # A refusal (UNAUTHENTICATED, INVALID_ARGUMENT) comes trailers-only: its empty
                # headers can be read before its status, so wait for the status. A loopwatch
                # older than the header keeps streaming: taken as subscribed after the wait.
                try:
                    call.exception(timeout=STATUS_WAIT_S)
                except grpc.FutureTimeoutError:
                    pass
            if not call.is_active():
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
