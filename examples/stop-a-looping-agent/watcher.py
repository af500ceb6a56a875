"""Kill-signal watchers: wait for loopwatch to say "kill" for one trace.

loopwatch publishes every warn/kill signal as one JSON object
(`schemas/loopwatch.signal.v1.json`: `trace_id`, `action`, `profile`, `pattern`,
`message`, ...). A watcher subscribes *before* the agent starts, so no signal of the
run can be missed, and `kill_signal(trace_id)` returns the first signal with
`action == "kill"` for that trace.

- `RedisWatcher`: `SUBSCRIBE <channel>` (loopwatch's `signals.redis.channel`, default
  `loopwatch:signals`).
- `NatsWatcher`: core subscription to `<subject_prefix>.kill.>` (loopwatch publishes on
  `<subject_prefix>.<action>.<service>`, default prefix `loopwatch.signals`). A core
  subscription receives JetStream-published messages too, as long as it is live.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any, Protocol

# How long connecting and confirming a subscription may take before we give up.
CONNECT_TIMEOUT_S = 10.0


class Watcher(Protocol):
    """What `agent.py` needs from a signal source."""

    async def start(self) -> None:
        """Connects and subscribes; returns once the server has confirmed the subscription."""

    async def kill_signal(self, trace_id: str) -> dict[str, Any]:
        """Waits for, and returns, the first kill signal whose `trace_id` is `trace_id`."""

    async def close(self) -> None:
        """Unsubscribes and disconnects."""


def parse_kill(payload: bytes | str, trace_id: str) -> dict[str, Any] | None:
    """The signal in `payload` if it is a kill for `trace_id`, else None.

    Malformed payloads are reported on stderr and ignored: a watcher must not crash
    the agent because somebody published garbage on the channel.
    """
    try:
        signal = json.loads(payload)
    except (ValueError, UnicodeDecodeError) as err:
        print(f"watcher: ignoring a non-JSON message: {err}", file=sys.stderr)
        return None
    if not isinstance(signal, dict):
        return None
    if signal.get("action") == "kill" and signal.get("trace_id") == trace_id:
        return signal
    return None


class RedisWatcher:
    """Redis pub/sub watcher (redis-py asyncio)."""

    def __init__(self, url: str, channel: str) -> None:
        self.url = url
        self.channel = channel
        self._client = None
        self._pubsub = None

    async def start(self) -> None:
        import redis.asyncio as redis

        self._client = redis.Redis.from_url(self.url)
        self._pubsub = self._client.pubsub()
        await asyncio.wait_for(self._pubsub.subscribe(self.channel), CONNECT_TIMEOUT_S)
        # SUBSCRIBE is only in force once the server's confirmation has been read.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CONNECT_TIMEOUT_S
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError(f"no SUBSCRIBE confirmation for {self.channel!r}")
            message = await self._pubsub.get_message(timeout=remaining)
            if message is not None and message["type"] == "subscribe":
                return

    async def kill_signal(self, trace_id: str) -> dict[str, Any]:
        assert self._pubsub is not None, "start() first"
        async for message in self._pubsub.listen():
            if message["type"] != "message":
                continue
            signal = parse_kill(message["data"], trace_id)
            if signal is not None:
                return signal
        raise ConnectionError("Redis subscription ended")

    async def close(self) -> None:
        if self._pubsub is not None:
            await self._pubsub.aclose()
        if self._client is not None:
            await self._client.aclose()


class NatsWatcher:
    """NATS core-subscription watcher (nats-py)."""

    def __init__(self, url: str, subject_prefix: str) -> None:
        self.url = url
        self.subject = f"{subject_prefix}.kill.>"
        self._nc = None
        self._sub = None

    async def start(self) -> None:
        import nats

        self._nc = await nats.connect(
            self.url, connect_timeout=CONNECT_TIMEOUT_S, max_reconnect_attempts=3
        )
        self._sub = await self._nc.subscribe(self.subject)
        # A PING/PONG round trip after SUB: the server has registered the subscription.
        await self._nc.flush(timeout=CONNECT_TIMEOUT_S)

    async def kill_signal(self, trace_id: str) -> dict[str, Any]:
        assert self._sub is not None, "start() first"
        async for message in self._sub.messages:
            signal = parse_kill(message.data, trace_id)
            if signal is not None:
                return signal
        raise ConnectionError("NATS subscription ended")

    async def close(self) -> None:
        if self._nc is not None:
            await self._nc.drain()
