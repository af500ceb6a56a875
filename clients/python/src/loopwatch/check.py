"""The pre-execution check: asks loopwatch what it would decide about a tool call before
the call runs (`loopwatch.v1.Guard/Check` over gRPC, or `POST /v1/check` on the admin API).
The check changes no state on the server."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import grpc

from . import config
from .errors import AdminError, ConfigError, TransportError

#: Decisions the check can answer, least to most severe.
DECISIONS = ("allow", "warn", "require_approval", "deny")


@dataclass(frozen=True)
class CheckResult:
    """loopwatch's answer about one call.

    Attributes:
        decision: `allow`, `warn` (run it, and show the model `message`), `deny` (a kill
            profile would fire: do not run it) or `require_approval`.
        pattern: the pattern that would fire, "" for allow.
        count: repetitions the pattern would count, 0 for allow.
        message: nudge text for the model, "" for allow.
        profile: the profile that decided, "" for allow.
        known_run: whether loopwatch holds state for the run.
    """

    decision: str
    pattern: str = ""
    count: int = 0
    message: str = ""
    profile: str = ""
    known_run: bool = False

    @classmethod
    def allow(cls) -> CheckResult:
        """The answer used when the check could not be made and the guard fails open."""
        return cls("allow")


def arguments_text(arguments: Any) -> str:
    """Arguments as `gen_ai.tool.call.arguments` carries them: a string as is, anything else
    as compact JSON (keys sorted; values JSON cannot hold written with `str`)."""
    if isinstance(arguments, str):
        return arguments
    if isinstance(arguments, bytes):
        return arguments.decode("utf-8", "replace")
    return json.dumps(arguments, sort_keys=True, separators=(",", ":"), default=str, ensure_ascii=False)


class Checker:
    """Makes pre-execution checks.

    Args:
        transport: `"grpc"` (`Guard/Check` on loopwatch's OTLP gRPC port) or `"http"`
            (`POST /v1/check` on the admin API).
        endpoint: gRPC endpoint (transport grpc), see `config.grpc_endpoint`.
        admin: admin client (transport http).
        bearer: admin token, sent as gRPC `authorization` metadata.
        timeout: seconds per check.

    Raises ConfigError for an unknown transport.
    """

    def __init__(
        self,
        transport: str = "grpc",
        *,
        endpoint: str | None = None,
        admin: config.AdminClient | None = None,
        bearer: str | None = None,
        timeout: float = 1.0,
    ) -> None:
        if transport not in ("grpc", "http"):
            raise ConfigError(f"check transport must be 'grpc' or 'http', got {transport!r}")
        self.transport = transport
        self.timeout = timeout
        self._metadata = config.grpc_metadata(bearer)
        self._admin = admin
        self._channel: grpc.Channel | None = None
        self._stub: Any = None
        if transport == "grpc":
            from .v1 import guard_pb2_grpc

            self._channel = config.grpc_channel(config.grpc_endpoint(endpoint))
            self._stub = guard_pb2_grpc.GuardStub(self._channel)
        elif admin is None:
            raise ConfigError("check transport 'http' needs an admin client")

    def check(self, *, trace_id: str, run_key: str | None, tool_name: str, arguments: Any) -> CheckResult:
        """Asks about one call. `run_key` wins over `trace_id` when given.

        Raises TransportError when loopwatch cannot be reached or refuses the request
        (e.g. an empty tool name), with loopwatch's reason.
        """
        args = arguments_text(arguments)
        if self.transport == "grpc":
            from .v1 import guard_pb2

            request = guard_pb2.CheckRequest(
                trace_id=trace_id, run_key=run_key or "", tool_name=tool_name, arguments=args
            )
            try:
                reply = self._stub.Check(request, timeout=self.timeout, metadata=self._metadata)
            except grpc.RpcError as err:
                raise TransportError(f"Guard/Check: {err.code().name}: {err.details()}") from None
            return CheckResult(
                decision=reply.decision,
                pattern=reply.pattern,
                count=reply.count,
                message=reply.message,
                profile=reply.profile,
                known_run=reply.known_run,
            )
        body: dict[str, Any] = {"tool_name": tool_name, "arguments": args}
        if run_key:
            body["run_key"] = run_key
        else:
            body["trace_id"] = trace_id
        assert self._admin is not None
        try:
            reply = self._admin.request("POST", "/v1/check", body)
        except AdminError as err:
            raise TransportError(str(err)) from None
        if not isinstance(reply, dict) or reply.get("decision") not in DECISIONS:
            raise TransportError(f"POST /v1/check: unexpected answer {reply!r}")
        return CheckResult(
            decision=reply["decision"],
            pattern=str(reply.get("pattern") or ""),
            count=int(reply.get("count") or 0),
            message=str(reply.get("message") or ""),
            profile=str(reply.get("profile") or ""),
            known_run=bool(reply.get("known_run")),
        )

    def close(self) -> None:
        """Closes the gRPC channel (no-op for http)."""
        if self._channel is not None:
            self._channel.close()
