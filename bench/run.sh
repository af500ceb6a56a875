#!/usr/bin/env bash
# Reproducible benchmark: loopwatch vs a plain OTLP pass-through vs rotel (when installed),
# each a separate process pinned to CPU 0, loaded by the same clients and counting sink on
# CPU 1. Writes markdown tables (bench/results.md, or --out FILE) and prints them: the
# closed-loop matrix, worker-thread scaling (1 worker on CPU 0, 2 workers on CPUs 0-1,
# which the clients share), the latency step (open-loop load at half of loopwatch's
# maximum, loopwatch's p99 next to the pass-through's) and memory.
#
#   bench/run.sh                  # full run: release build, 4 interleaved rounds of 5 s
#   bench/run.sh --quick          # smoke test: 1 round of 300 ms per cell, 1 s latency loads
#   bench/run.sh --rounds 6 --duration 10s --out /tmp/b.md
#   bench/run.sh --no-latency     # without the latency step
#   bench/run.sh --worker-threads # without the worker-thread scaling cells
#   bench/run.sh --raw-passthrough # also a raw pass-through (bytes forwarded as received:
#                                  # the transport's own cost, the floor of any server here)
#
# Every other flag goes to `loopwatch-loadgen bench` (see `loopwatch-loadgen bench --help`).
# rotel: `pip install rotel` (a Rust collector shipped as a Python wheel); the script finds
# its `rotel-agent` binary through the Python package, or set ROTEL=/path/to/rotel-agent.
# Needs Linux (/proc) and taskset (util-linux) for pinning; without taskset nothing is pinned.
set -euo pipefail
cd "$(dirname "$0")/.."

target="${CARGO_TARGET_DIR:-target}"
cargo build --release --bins
bin="$target/release"

if [ -z "${ROTEL:-}" ]; then
  for py in python3 python; do
    if command -v "$py" >/dev/null; then
      ROTEL=$("$py" -c 'import os, rotel; print(os.path.join(os.path.dirname(rotel.__file__), "rotel-agent"))' 2>/dev/null || true)
      [ -n "$ROTEL" ] && break
    fi
  done
fi
if [ -n "${ROTEL:-}" ] && [ -x "$ROTEL" ]; then
  export ROTEL
else
  echo "bench: rotel not installed (pip install rotel, or set ROTEL): its rows are left out" >&2
  unset ROTEL
fi

out=bench/results.md
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --out=*) out="${1#--out=}"; shift ;;
    *) args+=("$1"); shift ;;
  esac
done

pin=()
if command -v taskset >/dev/null && [ "$(nproc --all)" -ge 2 ]; then
  pin=(taskset -c 1)
fi
"${pin[@]}" "$bin/loopwatch-loadgen" bench --loopwatch "$bin/loopwatch" \
  --server-cpus 0 --out "$out" "${args[@]}"
cat "$out"
