"""The checked-in gRPC stubs are what scripts/gen_proto.py makes from proto/ now."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import need_module

HERE = Path(__file__).resolve().parent
CHECKED_IN = HERE.parent / "src" / "loopwatch" / "v1"


def test_stubs_are_current(tmp_path):
    need_module("grpc_tools")
    result = subprocess.run(
        [sys.executable, str(HERE.parent / "scripts" / "gen_proto.py"), "--out", str(tmp_path)],
        capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stderr
    generated = sorted(p.name for p in (tmp_path / "loopwatch" / "v1").iterdir())
    assert generated == sorted(p.name for p in CHECKED_IN.glob("*_pb2*")), generated
    for name in generated:
        fresh = (tmp_path / "loopwatch" / "v1" / name).read_text()
        assert (CHECKED_IN / name).read_text() == fresh, (
            f"src/loopwatch/v1/{name} is stale: run `python scripts/gen_proto.py` (grpcio-tools of the dev extra)"
        )


def test_stubs_carry_every_service_and_field():
    from loopwatch.v1 import guard_pb2, guard_pb2_grpc, signals_pb2, signals_pb2_grpc

    assert set(guard_pb2.CheckResponse.DESCRIPTOR.fields_by_name) == {
        "decision", "pattern", "count", "message", "profile", "known_run"
    }
    assert {"trace_id", "run_key", "tool_name", "arguments"} == set(guard_pb2.CheckRequest.DESCRIPTOR.fields_by_name)
    assert "message" in signals_pb2.Signal.DESCRIPTOR.fields_by_name
    assert hasattr(guard_pb2_grpc, "GuardStub") and hasattr(signals_pb2_grpc, "SignalsStub")
