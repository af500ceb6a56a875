"""Regenerates the checked-in gRPC stubs under src/loopwatch/v1/ from the repository's proto/.

Usage: python scripts/gen_proto.py [--out DIR]

Needs grpcio-tools (the `dev` extra pins the version the checked-in files were made with;
`tests/test_stubs.py` fails when they differ from what this script writes). Without
--out the files are written in place (src/); with it, under DIR/loopwatch/v1/.
Exits non-zero, with protoc's message, when generation fails.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGE_ROOT = HERE.parent / "src"
PROTO_ROOT = HERE.parent.parent.parent / "proto"
PROTOS = ["loopwatch/v1/signals.proto", "loopwatch/v1/guard.proto"]


def generate(out: Path) -> None:
    """Writes `*_pb2.py`, `*_pb2.pyi` and `*_pb2_grpc.py` of every proto under `out`.

    Raises RuntimeError naming the proto when protoc fails.
    """
    from grpc_tools import protoc
    import grpc_tools

    well_known = Path(grpc_tools.__file__).parent / "_proto"
    out.mkdir(parents=True, exist_ok=True)
    for proto in PROTOS:
        code = protoc.main(
            [
                "grpc_tools.protoc",
                f"-I{PROTO_ROOT}",
                f"-I{well_known}",
                f"--python_out={out}",
                f"--pyi_out={out}",
                f"--grpc_python_out={out}",
                str(PROTO_ROOT / proto),
            ]
        )
        if code != 0:
            raise RuntimeError(f"protoc failed on {proto} (exit {code})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=PACKAGE_ROOT, help="output root (default: src/)")
    args = parser.parse_args()
    try:
        generate(args.out)
    except RuntimeError as err:
        print(err, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
