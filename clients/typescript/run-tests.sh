#!/usr/bin/env bash
# Installs (npm ci, from package-lock.json), builds and tests the TypeScript client
# (@loopwatch/client) and the examples/typescript-* agents. Exits non-zero on any failure.
#
# The integration tests start the real loopwatch binary: env LOOPWATCH_BIN, default
# <repo>/target/debug/loopwatch. Under CI (env CI set) a missing binary or framework
# package fails the run; elsewhere the server tests are skipped with the reason.
set -euo pipefail
cd "$(dirname "$0")"
repo="$(cd ../.. && pwd)"

export LOOPWATCH_BIN="${LOOPWATCH_BIN:-$repo/target/debug/loopwatch}"
if [ ! -x "$LOOPWATCH_BIN" ]; then
  if [ -n "${CI:-}" ]; then
    echo "run-tests.sh: loopwatch binary not found at $LOOPWATCH_BIN (cargo build, or set LOOPWATCH_BIN)" >&2
    exit 1
  fi
  echo "run-tests.sh: warning: no loopwatch binary at $LOOPWATCH_BIN; the server tests will be skipped" >&2
fi

npm ci --no-audit --no-fund
rm -rf dist dist-test
npm run build
npm run build:test
# The tap reporter ends with the summary lines (# tests, # pass, # fail, ...).
node --test --test-reporter=tap dist-test/test/*.test.js
