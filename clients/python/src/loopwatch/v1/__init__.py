"""Generated gRPC stubs of loopwatch's `loopwatch.v1` protos (`proto/loopwatch/v1/`).

Do not edit the `*_pb2*` files by hand: regenerate them with `scripts/gen_proto.py`
(`tests/test_stubs.py` fails when they are stale).
"""
