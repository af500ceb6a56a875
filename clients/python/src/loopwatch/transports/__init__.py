"""Signal transports: how a `Guard` hears loopwatch's signals.

| name | class | needs | hears |
|---|---|---|---|
| `grpc` (default) | `GrpcTransport` | nothing extra | `loopwatch.v1.Signals/Watch` on the OTLP gRPC port |
| `http` | `HttpPollTransport` | nothing extra | polls `GET /v1/signals` on the admin API |
| `redis` | `RedisTransport` | extra `[redis]` | `SUBSCRIBE loopwatch:signals` (loopwatch's Redis sink) |
| `nats` | `NatsTransport` | extra `[nats]` | core subscription to `loopwatch.signals.>` (loopwatch's NATS sink) |

Each runs on its own daemon thread, calls `deliver(signal)` for every signal it hears
(on that thread), and reconnects with backoff when the connection breaks; after a
reconnect it calls `on_reconnect()` so the guard can fetch what it missed.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

from ..signal import Signal

log = logging.getLogger("loopwatch")

Deliver = Callable[[Signal], None]


class Transport:
    """Base of the transports: a daemon thread running `_serve` until `close()`.

    Subclasses implement `_serve()`, which connects, calls `self._ready.set()` once the
    subscription is in force, delivers signals until the connection ends (return or raise),
    and checks `self._closing`.
    """

    name = "transport"

    def __init__(self, initial_backoff: float = 0.1, max_backoff: float = 5.0) -> None:
        self._deliver: Deliver | None = None
        self._on_reconnect: Callable[[], None] | None = None
        self._ready = threading.Event()
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None
        self._initial_backoff = initial_backoff
        self._max_backoff = max_backoff
        self.last_error: str | None = None
        self._pending_catch_up = False

    def start(self, deliver: Deliver, on_reconnect: Callable[[], None] | None = None) -> None:
        """Starts the background thread (idempotent); returns at once."""
        if self._thread is not None:
            return
        self._deliver = deliver
        self._on_reconnect = on_reconnect
        self._thread = threading.Thread(target=self._reconnect_loop, name=f"loopwatch-{self.name}", daemon=True)
        self._thread.start()

    def wait_ready(self, timeout: float) -> bool:
        """Whether the subscription is in force, waiting up to `timeout` seconds."""
        return self._ready.wait(timeout)

    @property
    def ready(self) -> bool:
        """Whether the subscription is in force now."""
        return self._ready.is_set()

    def _reconnect_loop(self) -> None:
        backoff = self._initial_backoff
        connected_before = False
        while not self._closing.is_set():
            try:
                self._serve()
                self.last_error = None
            except Exception as err:  # noqa: BLE001 - reconnect on any failure
                self.last_error = f"{type(err).__name__}: {err}"
                if not self._closing.is_set():
                    log.warning("loopwatch: %s signal transport: %s (reconnecting)", self.name, self.last_error)
            if self._ready.is_set():
                connected_before = True
                backoff = self._initial_backoff
            self._ready.clear()
            if self._closing.wait(backoff):
                return
            backoff = min(self._max_backoff, backoff * 2)
            if connected_before and self._on_reconnect is not None:
                self._pending_catch_up = True

    def _subscribed(self) -> None:
        """Marks the subscription in force; after a reconnect, asks the guard to catch up."""
        self._ready.set()
        if self._pending_catch_up and self._on_reconnect is not None:
            self._pending_catch_up = False
            try:
                self._on_reconnect()
            except Exception:  # noqa: BLE001
                log.exception("loopwatch: catching up after a reconnect failed")

    def _serve(self) -> None:
        raise NotImplementedError

    def _cancel(self) -> None:
        """Interrupts a blocking `_serve` (subclasses)."""

    def close(self) -> None:
        """Stops the thread and closes the connection (waits up to 5 s)."""
        self._closing.set()
        self._cancel()
        if self._thread is not None:
            self._thread.join(timeout=5)


def make_transport(name: str, **options: object) -> Transport:
    """The transport called `name` (`grpc`, `http`, `redis`, `nats`) built with `options`.

    Raises ConfigError for an unknown name; ImportError (naming the extra) when the
    transport's client library is not installed.
    """
    from ..errors import ConfigError

    if name == "grpc":
        from .grpc import GrpcTransport

        return GrpcTransport(**options)  # type: ignore[arg-type]
    if name == "http":
        from .http import HttpPollTransport

        return HttpPollTransport(**options)  # type: ignore[arg-type]
    if name == "redis":
        from .redis import RedisTransport

        return RedisTransport(**options)  # type: ignore[arg-type]
    if name == "nats":
        from .nats import NatsTransport

        return NatsTransport(**options)  # type: ignore[arg-type]
    raise ConfigError(f"signal transport must be grpc, http, redis or nats, got {name!r}")
