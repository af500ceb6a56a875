"""Shared fixtures: real loopwatch servers, and an `instrument()` per server.

A missing loopwatch binary or framework package skips locally and FAILS when env CI is set.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Iterator

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from lwserver import LoopwatchServer, loopwatch_bin  # noqa: E402

CI = bool(os.environ.get("CI"))

# How long the looping tool of a signals-only test takes, in seconds. Without the pre-check
# a kill arrives asynchronously (gRPC Watch), so "stopped within one call of the threshold"
# holds for a tool that does some work; a 0 ms tool on a loaded machine can run twice more
# before the kill lands (test_timeliness measures 0 ms tools without asserting the bound).
SIGNALS_ONLY_TOOL_SECONDS = 0.02

APPROVAL_CONFIG = """
[profiles.stop]
action = "require_approval"
"""


def need(condition: bool, reason: str) -> None:
    """Skips (locally) or fails (CI) when `condition` does not hold."""
    if condition:
        return
    if CI:
        pytest.fail(f"CI: {reason}", pytrace=False)
    pytest.skip(reason)


def need_module(name: str) -> object:
    """Imports `name`, or skips (locally) / fails (CI)."""
    try:
        return importlib.import_module(name)
    except ImportError as err:
        need(False, f"package for {name!r} not installed: {err}")
        raise


def _server(config: str) -> Iterator[LoopwatchServer]:
    """A started loopwatch with `config` (TOML), stopped after use."""
    need(loopwatch_bin().exists(), f"loopwatch binary missing at {loopwatch_bin()} (set LOOPWATCH_BIN)")
    server = LoopwatchServer(config).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def lw() -> Iterator[LoopwatchServer]:
    """loopwatch with the default profiles (nudge warns at 3 same results, stop kills at 6)."""
    yield from _server("")


@pytest.fixture(scope="session")
def lw_approval() -> Iterator[LoopwatchServer]:
    """loopwatch whose `stop` profile asks for approval instead of killing."""
    yield from _server(APPROVAL_CONFIG)


@pytest.fixture(scope="session")
def inst(lw: LoopwatchServer):
    """`instrument()` exporting to `lw` (not installed globally)."""
    import loopwatch

    instrumentation = loopwatch.instrument(lw.grpc_endpoint, "loopwatch-client-tests", set_global=False)
    yield instrumentation
    instrumentation.shutdown()


@pytest.fixture
def make_guard(lw: LoopwatchServer, inst):
    """Builds guards bound to `lw` and closes them after the test."""
    import loopwatch

    guards: list[loopwatch.Guard] = []

    def build(**kwargs: object) -> loopwatch.Guard:
        kwargs.setdefault("endpoint", lw.grpc_endpoint)
        kwargs.setdefault("admin_url", lw.admin_url)
        kwargs.setdefault("tracer_provider", inst.tracer_provider)
        guard = loopwatch.Guard(**kwargs)  # type: ignore[arg-type]
        guards.append(guard)
        return guard

    yield build
    for guard in guards:
        guard.close()


@pytest.fixture(scope="session")
def _memory_exporter(inst):
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    inst.tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


@pytest.fixture
def spans(_memory_exporter):
    """Finished spans of `inst`'s provider during the test (a copy also goes to loopwatch)."""
    _memory_exporter.clear()
    return _memory_exporter


def pytest_terminal_summary(terminalreporter):
    """Prints the timeliness figures measured by tests/test_timeliness.py."""
    module = sys.modules.get("test_timeliness")
    results = getattr(module, "RESULTS", None)
    if not results:
        return
    terminalreporter.section("timeliness")
    for row in results:
        terminalreporter.write_line(
            f"{row['setting']:<32} runs {row['runs']}  calls after threshold: {row['calls_after_threshold']}"
            f"  threshold call ran: {'yes' if row['threshold_call_ran'] else 'no'}"
            f"  stop p50 {row['stop_ms_p50']} ms  p99 {row['stop_ms_p99']} ms"
        )
