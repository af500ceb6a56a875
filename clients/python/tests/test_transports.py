"""Every signal transport against a real loopwatch: gRPC (with and without the admin token),
HTTP polling, and loopwatch's Redis and NATS sinks (Redis 127.0.0.1:6379, NATS 127.0.0.1:4222).

The sinks and polling add a few ms over the gRPC stream (a sink queue, a poll interval), so
their tests use tools that take 50 ms, as real tools do: the stop must come within one call.
"""

from __future__ import annotations

import os
import socket

import pytest

import loopwatch
from conftest import _server, need, need_module
from test_core_loop import looping_agent

REDIS_URL = os.environ.get("LOOPWATCH_TEST_REDIS_URL", "redis://127.0.0.1:6379")
NATS_URL = os.environ.get("LOOPWATCH_TEST_NATS_URL", "nats://127.0.0.1:4222")


def reachable(url: str) -> bool:
    host_port = url.split("://", 1)[1]
    host, port = host_port.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return True
    except OSError:
        return False


def stopped_by(server, transport, tool_delay=0.0, **options):
    inst = loopwatch.instrument(server.grpc_endpoint, "loopwatch-transport-tests", set_global=False)
    guard = loopwatch.Guard(
        endpoint=server.grpc_endpoint,
        admin_url=server.admin_url,
        tracer_provider=inst.tracer_provider,
        transport=transport,
        transport_options=options,
        **({"token": "s3cret"} if "auth_token" in server.config_path.read_text() else {}),
    )
    try:
        assert guard.start(), guard.transport.last_error
        calls: list[int] = []
        with pytest.raises(loopwatch.LoopDetected) as info:
            with guard.run(f"{transport}-loop"):
                looping_agent(guard, calls, tool_delay=tool_delay)
        return info.value, calls
    finally:
        guard.close()
        inst.shutdown()


def test_http_polling(lw):
    # a signal waits up to one poll interval (20 ms): with tools of 50 ms, within a call
    exc, calls = stopped_by(lw, "http", tool_delay=0.05, interval=0.02)
    assert exc.action == "kill" and exc.signal is not None and exc.signal.profile == "stop"
    assert 6 <= len(calls) <= 7, len(calls)


def test_redis_sink():
    need_module("redis")
    need(reachable(REDIS_URL), f"Redis not reachable at {REDIS_URL}")
    channel = f"loopwatch:client-test:{os.getpid()}"
    for server in _server(f'[signals.redis]\nurl = "{REDIS_URL}"\nchannel = "{channel}"\n'):
        exc, calls = stopped_by(server, "redis", tool_delay=0.05, url=REDIS_URL, channel=channel)
        assert exc.action == "kill" and exc.signal is not None
        assert 6 <= len(calls) <= 7, len(calls)


def test_nats_sink():
    need_module("nats")
    need(reachable(NATS_URL), f"NATS not reachable at {NATS_URL}")
    prefix = f"loopwatch_client_test_{os.getpid()}"
    for server in _server(f'[signals.nats]\nurl = "{NATS_URL}"\nsubject_prefix = "{prefix}"\njetstream = false\n'):
        exc, calls = stopped_by(server, "nats", tool_delay=0.05, url=NATS_URL, subject_prefix=prefix)
        assert exc.action == "kill" and exc.signal is not None
        assert 6 <= len(calls) <= 7, len(calls)


def test_grpc_with_the_admin_token():
    for server in _server('[admin]\nauth_token = "s3cret"\n'):
        exc, calls = stopped_by(server, "grpc")
        assert exc.action == "kill"
        # without the token Watch is refused, and the guard says why
        guard = loopwatch.Guard(endpoint=server.grpc_endpoint, admin_url=server.admin_url, token="wrong", connect_timeout=1.0)
        try:
            assert guard.start() is False
            assert "UNAUTHENTICATED" in (guard.transport.last_error or "")
        finally:
            guard.close()


def test_unknown_transport_is_a_config_error():
    with pytest.raises(loopwatch.ConfigError, match="signal transport"):
        loopwatch.Guard(endpoint="http://127.0.0.1:1", transport="carrier-pigeon")
    with pytest.raises(loopwatch.ConfigError, match="host:port"):
        loopwatch.Guard(endpoint="http://127.0.0.1")
    with pytest.raises(loopwatch.ConfigError, match="check transport"):
        loopwatch.Guard(endpoint="http://127.0.0.1:1", check=True, check_transport="smtp")
