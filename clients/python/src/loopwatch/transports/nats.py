"""`NatsTransport`: loopwatch's NATS sink (subjects `<prefix>.<action>.<service>`). Extra `[nats]`."""

from __future__ import annotations

import asyncio
import json
import os

from ..errors import TransportError
from ..signal import Signal
from . import Transport, log


class NatsTransport(Transport):
    """Core NATS subscription to `<subject_prefix>.>` (also sees JetStream-published signals
    while connected).

    Args:
        url: NATS URL (default env `LOOPWATCH_SIGNALS__NATS__URL`, else `nats://127.0.0.1:4222`).
        subject_prefix: loopwatch's `signals.nats.subject_prefix` (default `loopwatch.signals`).

    Raises ImportError naming the extra when nats-py is missing.
    """

    name = "nats"

    def __init__(self, url: str | None = None, subject_prefix: str = "loopwatch.signals", **backoff: float) -> None:
        super().__init__(**backoff)
        try:
            import nats  # noqa: F401
        except ImportError as err:
            raise ImportError("the nats transport needs `pip install loopwatch[nats]`") from err
        self.url = url or os.environ.get("LOOPWATCH_SIGNALS__NATS__URL") or "nats://127.0.0.1:4222"
        self.subject = f"{subject_prefix}.>"
        self._aloop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None

    def _serve(self) -> None:
        asyncio.run(self._run())

    async def _run(self) -> None:
        import nats

        self._aloop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        disconnected = asyncio.Event()

        async def on_disconnect() -> None:
            disconnected.set()

        nc = await nats.connect(
            self.url, connect_timeout=5, allow_reconnect=False, disconnected_cb=on_disconnect
        )
        try:

            async def on_message(msg: object) -> None:
                try:
                    signal = Signal.from_json(json.loads(msg.data))  # type: ignore[attr-defined]
                except (ValueError, TransportError) as err:
                    log.warning("loopwatch: ignoring a NATS message that is not a signal: %s", err)
                    return
                assert self._deliver is not None
                self._deliver(signal)

            await nc.subscribe(self.subject, cb=on_message)
            await nc.flush(timeout=5)  # PING/PONG after SUB: the server has registered it
            self._subscribed()
            stop = asyncio.ensure_future(self._stop.wait())
            lost = asyncio.ensure_future(disconnected.wait())
            await asyncio.wait({stop, lost}, return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
            lost.cancel()
            if disconnected.is_set() and not self._closing.is_set():
                raise RuntimeError("NATS connection lost")
        finally:
            if not nc.is_closed:
                await nc.close()

    def _cancel(self) -> None:
        aloop, stop = self._aloop, self._stop
        if aloop is not None and stop is not None and not aloop.is_closed():
            aloop.call_soon_threadsafe(stop.set)
