"""`HttpPollTransport`: polls `GET /v1/signals` on loopwatch's admin API."""

from __future__ import annotations

import collections
import time

from .. import config
from ..signal import Signal
from . import Transport

#: How far behind the newest `time_unix_nano` seen each poll looks again (late spans,
#: clock skew between agents), ns. Ids already delivered are skipped.
SINCE_MARGIN_NS = 30_000_000_000


class HttpPollTransport(Transport):
    """Polls the admin API for signals, de-duplicating on signal id.

    Slower than the gRPC stream (a signal waits up to `interval` seconds) and limited to
    loopwatch's in-memory ring (`signals.recent_capacity`), see the README's "Polling".

    Args:
        admin: admin API client (default: `config.AdminClient()`).
        interval: seconds between polls.
        trace_id: only this trace's signals ("" = all).
    """

    name = "http"

    def __init__(
        self,
        admin: config.AdminClient | None = None,
        interval: float = 0.05,
        trace_id: str = "",
        **backoff: float,
    ) -> None:
        super().__init__(**backoff)
        self.admin = admin or config.AdminClient()
        self.interval = interval
        self.trace_id = trace_id
        self._seen: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._since = time.time_ns() - SINCE_MARGIN_NS

    def poll_once(self) -> list[Signal]:
        """One poll: the signals not delivered before, oldest first.

        Raises TransportError / AdminError when the admin API fails.
        """
        reply = self.admin.request(
            "GET", "/v1/signals", query={"since": str(max(0, self._since)), "trace_id": self.trace_id}
        )
        fresh: list[Signal] = []
        for item in reply.get("data", []) if isinstance(reply, dict) else []:
            signal = Signal.from_json(item)
            self._since = max(self._since, signal.time_unix_nano - SINCE_MARGIN_NS)
            if signal.id in self._seen:
                continue
            self._seen[signal.id] = None
            while len(self._seen) > 4096:
                self._seen.popitem(last=False)
            fresh.append(signal)
        return fresh

    def _serve(self) -> None:
        while not self._closing.is_set():
            signals = self.poll_once()
            if not self._ready.is_set():
                self._subscribed()
            for signal in signals:
                assert self._deliver is not None
                self._deliver(signal)
            if self._closing.wait(self.interval):
                return
