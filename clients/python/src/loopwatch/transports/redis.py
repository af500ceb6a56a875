"""`RedisTransport`: loopwatch's Redis sink (`PUBLISH <channel> <signal JSON>`). Extra `[redis]`."""

from __future__ import annotations

import json

from ..errors import TransportError
from ..signal import Signal
from . import Transport, log


class RedisTransport(Transport):
    """Subscribes to loopwatch's Redis channel.

    Args:
        url: Redis URL (default env `LOOPWATCH_SIGNALS__REDIS__URL`, else
            `redis://127.0.0.1:6379`).
        channel: loopwatch's `signals.redis.channel` (default `loopwatch:signals`).

    Raises ImportError naming the extra when redis-py is missing.
    """

    name = "redis"

    def __init__(self, url: str | None = None, channel: str = "loopwatch:signals", **backoff: float) -> None:
        super().__init__(**backoff)
        try:
            import redis  # noqa: F401
        except ImportError as err:
            raise ImportError("the redis transport needs `pip install loopwatch[redis]`") from err
        import os

        self.url = url or os.environ.get("LOOPWATCH_SIGNALS__REDIS__URL") or "redis://127.0.0.1:6379"
        self.channel = channel
        self._pubsub = None

    def _serve(self) -> None:
        import redis

        client = redis.Redis.from_url(self.url, socket_connect_timeout=5)
        pubsub = client.pubsub()
        self._pubsub = pubsub
        try:
            pubsub.subscribe(self.channel)
            while not self._closing.is_set():
                message = pubsub.get_message(timeout=0.2)
                if message is None:
                    continue
                if message["type"] == "subscribe":
                    self._subscribed()  # the server confirmed SUBSCRIBE
                elif message["type"] == "message":
                    try:
                        signal = Signal.from_json(json.loads(message["data"]))
                    except (ValueError, TransportError) as err:
                        log.warning("loopwatch: ignoring a Redis message that is not a signal: %s", err)
                        continue
                    assert self._deliver is not None
                    self._deliver(signal)
        finally:
            self._pubsub = None
            pubsub.close()
            client.close()
