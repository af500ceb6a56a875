"""A hand-written agent loop guarded by loopwatch (no framework).

The "model" is scripted: it asks for fetch_url(url=A) at every step, and the tool keeps
failing the same way. loopwatch stops the run; with the pre-execution check (default) the
6th identical call is blocked before it runs.

Env: OTEL_EXPORTER_OTLP_ENDPOINT (loopwatch's OTLP/gRPC port, default http://localhost:4317),
LOOPWATCH_ADMIN_URL (default http://127.0.0.1:8787). `--no-check`: rely on signals only.
Prints one JSON line: {"stopped", "action", "tool_calls", "nudges"}.
"""

import json
import sys

import loopwatch

loopwatch.instrument(service_name="example-plain")
guard = loopwatch.Guard(check="--no-check" not in sys.argv)

tool_calls = 0


@guard.tool
def fetch_url(url: str) -> str:
    global tool_calls
    tool_calls += 1
    return "Error: connection refused"


def model(history: list[str]) -> tuple[str, dict]:
    return "fetch_url", {"url": "https://example.com/a"}  # a model stuck on one idea


outcome = {"stopped": False, "action": None}
history: list[str] = []
try:
    with guard.run("plain-agent") as run:
        for step in range(30):
            guard.checkpoint()
            history += [f"[loopwatch] {m}" for m in run.take_nudges()]  # show nudges to the model
            name, args = model(history)
            history.append(fetch_url(**args))
except loopwatch.LoopDetected as stop:
    outcome = {"stopped": True, "action": stop.action}
finally:
    guard.close()
outcome.update(tool_calls=tool_calls, nudges=sum(h.startswith("[loopwatch]") for h in history))
print(json.dumps(outcome))
