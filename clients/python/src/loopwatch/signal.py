"""`Signal`: one loop signal of loopwatch (schema `loopwatch.signal.v1`), whatever transport
carried it (gRPC `Signals/Watch`, `GET /v1/signals`, Redis, NATS)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from .errors import TransportError

#: Actions a signal can carry.
ACTIONS = ("warn", "kill", "require_approval")


@dataclass(frozen=True)
class Signal:
    """A loop signal (`proto/loopwatch/v1/signals.proto`, `schemas/loopwatch.signal.v1.json`).

    Attributes:
        id: stable id of (run_key, profile, pattern, occurrence), 32 lowercase hex chars.
        action: `warn`, `kill` or `require_approval`.
        trace_id: trace id of the span that completed the detection, lowercase hex.
        run_key: the run key (the trace id unless loopwatch keys runs otherwise).
        message: nudge text for the model ("" when none).
        pattern: e.g. `repeated_call`, `repeated_result`, `alternating_calls`, `cycle`.
        profile: detection profile, e.g. `nudge`, `stop`.
        count: repetitions that formed the loop.
        time_unix_nano: end time of the completing span, ns since the Unix epoch (agent clock).
        Other fields mirror the schema.
    """

    id: str
    action: str
    trace_id: str
    run_key: str
    message: str = ""
    pattern: str = ""
    profile: str = ""
    severity: str = ""
    count: int = 0
    window: int = 0
    occurrence: int = 0
    time_unix_nano: int = 0
    service_name: str | None = None
    agent_name: str | None = None
    tool_names: tuple[str, ...] = ()
    fingerprints: tuple[str, ...] = ()
    span_ids: tuple[str, ...] = ()
    first_span_id: str = ""
    schema: str = "loopwatch.signal.v1"
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_proto(cls, msg: Any) -> Signal:
        """From a `loopwatch.v1.Signal` message (gRPC `Watch`)."""
        return cls(
            id=msg.id,
            action=msg.action,
            trace_id=msg.trace_id,
            run_key=msg.run_key,
            message=msg.message,
            pattern=msg.pattern,
            profile=msg.profile,
            severity=msg.severity,
            count=msg.count,
            window=msg.window,
            occurrence=msg.occurrence,
            time_unix_nano=msg.time_unix_nano,
            service_name=msg.service_name if msg.HasField("service_name") else None,
            agent_name=msg.agent_name if msg.HasField("agent_name") else None,
            tool_names=tuple(msg.tool_names),
            fingerprints=tuple(msg.fingerprints),
            span_ids=tuple(msg.span_ids),
            first_span_id=msg.first_span_id,
            schema=msg.schema,
        )

    @classmethod
    def from_json(cls, obj: Any) -> Signal:
        """From a decoded JSON signal (HTTP, Redis, NATS payloads).

        Raises TransportError when `obj` is not an object with string `id`, `action`,
        `trace_id` (fields loopwatch always sends).
        """
        if not isinstance(obj, dict):
            raise TransportError(f"signal is not a JSON object: {type(obj).__name__}")
        for key in ("id", "action", "trace_id"):
            if not isinstance(obj.get(key), str):
                raise TransportError(f"signal without a string {key!r}")

        def text(key: str) -> str:
            value = obj.get(key)
            return value if isinstance(value, str) else ""

        def number(key: str) -> int:
            value = obj.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) else 0

        def strings(key: str) -> tuple[str, ...]:
            value = obj.get(key)
            return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else ()

        known = set(cls.__dataclass_fields__)
        return cls(
            id=obj["id"],
            action=obj["action"],
            trace_id=obj["trace_id"].lower(),
            run_key=text("run_key") or obj["trace_id"].lower(),
            message=text("message"),
            pattern=text("pattern"),
            profile=text("profile"),
            severity=text("severity"),
            count=number("count"),
            window=number("window"),
            occurrence=number("occurrence"),
            time_unix_nano=number("time_unix_nano"),
            service_name=obj.get("service_name") if isinstance(obj.get("service_name"), str) else None,
            agent_name=obj.get("agent_name") if isinstance(obj.get("agent_name"), str) else None,
            tool_names=strings("tool_names"),
            fingerprints=strings("fingerprints"),
            span_ids=strings("span_ids"),
            first_span_id=text("first_span_id"),
            schema=text("schema") or "loopwatch.signal.v1",
            extra={k: v for k, v in obj.items() if k not in known},
        )
