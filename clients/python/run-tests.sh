#!/usr/bin/env bash
# Tests of the Python client (clients/python) against the real loopwatch binary and the real
# framework packages, installed from the registry into two venvs (CrewAI pins pydantic and
# openai versions the other frameworks cannot share):
#   .venv-test         the package with extras dev + test-pydantic-ai, -openai-agents, -langchain, -smolagents
#   .venv-test-crewai  the package with extras dev + test-crewai (tests/test_crewai.py only)
# The loopwatch binary: env LOOPWATCH_BIN, else <repo>/target/debug/loopwatch (build it first).
# Redis (127.0.0.1:6379) and NATS (127.0.0.1:4222) must run for the sink transports' tests.
# With CI set, a missing binary, package or service fails the run (tests never skip).
# Exit status: non-zero when anything failed. The last line sums both runs:
#   "python client: N passed, N failed, N skipped".
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
PYTHON=${PYTHON:-python3}
export LOOPWATCH_BIN=${LOOPWATCH_BIN:-$REPO/target/debug/loopwatch}
REPORTS=$(mktemp -d)
trap 'rm -rf "$REPORTS"' EXIT

if [ ! -x "$LOOPWATCH_BIN" ]; then
  echo "run-tests.sh: loopwatch binary not found at $LOOPWATCH_BIN (cargo build, or set LOOPWATCH_BIN)" >&2
  [ -n "${CI:-}" ] && exit 1
fi

venv() {  # venv DIR EXTRAS: creates DIR if missing and installs the package with EXTRAS
  local dir=$1 extras=$2
  if [ ! -x "$dir/bin/python" ]; then
    "$PYTHON" -m venv "$dir" || return 1
    "$dir/bin/python" -m pip install -q --upgrade pip || return 1
  fi
  # Large wheels (CrewAI pulls chromadb, ~20 MB) sometimes break off mid-download: pip's
  # own retries, then the whole install again, before calling it a failure.
  local attempt
  for attempt in 1 2 3; do
    "$dir/bin/python" -m pip install -q --retries 10 --timeout 60 --upgrade "$HERE[$extras]" && return 0
    echo "run-tests.sh: pip install into $dir failed (attempt $attempt of 3)" >&2
    sleep $((attempt * 5))
  done
  return 1
}

status=0
run_pytest() {  # run_pytest VENV NAME ARGS...
  local dir=$1 name=$2; shift 2
  (cd "$HERE" && "$dir/bin/python" -m pytest -p no:cacheprovider --junitxml="$REPORTS/$name.xml" "$@") || status=1
}

MAIN="$HERE/.venv-test"
CREW="$HERE/.venv-test-crewai"
if venv "$MAIN" "dev,test-pydantic-ai,test-openai-agents,test-langchain,test-smolagents"; then
  run_pytest "$MAIN" main tests --ignore=tests/test_crewai.py
else
  echo "run-tests.sh: installing the main test venv failed" >&2; status=1
fi
if venv "$CREW" "dev,test-crewai"; then
  run_pytest "$CREW" crewai tests/test_crewai.py
else
  echo "run-tests.sh: installing the CrewAI test venv failed" >&2; status=1
fi

"$PYTHON" - "$REPORTS" <<'PY' || status=1
import sys, pathlib, xml.etree.ElementTree as ET
passed = failed = skipped = 0
for report in pathlib.Path(sys.argv[1]).glob("*.xml"):
    for suite in ET.parse(report).getroot().iter("testsuite"):
        tests, fails = int(suite.get("tests", 0)), int(suite.get("failures", 0)) + int(suite.get("errors", 0))
        skips = int(suite.get("skipped", 0))
        passed += tests - fails - skips; failed += fails; skipped += skips
print(f"python client: {passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed or not passed else 0)
PY
exit $status
