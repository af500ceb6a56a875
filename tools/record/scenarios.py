"""The scripted agent runs (same scripts as the corpus table in tests/fixtures/corpus/README.md).

Each scenario is a list of model turns. A turn is either a list of tool calls
``(tool, args, call_id)`` (``args`` is a dict in the key order the scripted model emits)
or a final text answer. Each tool returns the next scripted result for its name.
"""
from collections import defaultdict

FETCH_ERR = "Error: connection refused (ECONNREFUSED) while fetching https://example.com/a"
READ_A = "def main():\n    pass  # TODO: implement\n"
GREP_TODO = "a.py:2:    pass  # TODO: implement"
QUERIES = [
    "rust otlp crate", "tonic grpc server", "prost build", "opentelemetry proto",
    "span attributes", "genai semconv", "tool call span", "loop detection",
    "sliding window", "json canonical form", "tokio runtime", "tracing subscriber",
]

# Tool signatures: name -> (parameter names, description)
TOOLS = {
    "fetch_url": (["url", "limit"], "Fetch a URL."),
    "check_status": (["job"], "Check the status of a job."),
    "read_file": (["path"], "Read a file."),
    "grep": (["pattern"], "Search files for a pattern."),
    "search": (["query"], "Search the web."),
    "lookup_user": (["user_id", "request_id", "timestamp"], "Look up a user."),
}


def _s1():
    turns = []
    for i in range(6):
        args = {"url": "https://example.com/a", "limit": 1} if i % 2 == 0 else {"limit": 1, "url": "https://example.com/a"}
        turns.append([("fetch_url", args, f"call_s1_{i + 1}", FETCH_ERR)])
    turns.append("I could not fetch the page after several attempts; giving up.")
    return turns


def _s2():
    results = ["queued", "running 10%", "running 50%", "running 80%", "running 95%", "done"]
    turns = [[("check_status", {"job": "42"}, f"call_s2_{i + 1}", r)] for i, r in enumerate(results)]
    turns.append("Job 42 is done.")
    return turns


def _s3():
    turns = []
    for i in range(4):
        turns.append([("read_file", {"path": "a.py"}, f"call_s3_r{i + 1}", READ_A)])
        turns.append([("grep", {"pattern": "TODO"}, f"call_s3_g{i + 1}", GREP_TODO)])
    turns.append("The TODO is on line 2 of a.py.")
    return turns


def _s4():
    turns = []
    for i, q in enumerate(QUERIES):
        n = i + 1
        turns.append([("search", {"query": q}, f"call_s4_{n}", f"3 results for '{q}': doc-{n}a, doc-{n}b, doc-{n}c")])
    turns.append("Here is a summary of the 12 searches.")
    return turns


def _s5():
    turns = []
    for i in range(5):
        args = {"user_id": "u-17", "request_id": f"req-{1000 + 37 * i:05d}", "timestamp": f"2026-11-29T10:00:{7 * i:02d}Z"}
        turns.append([("lookup_user", args, f"call_s5_{i + 1}", "user u-17: status=active, plan=pro")])
    turns.append("User u-17 is active.")
    return turns


SCENARIOS = {
    "s1_stuck_repeat": (_s1, "same tool + same args x6 (key order alternates), same error text"),
    "s2_poll_progress": (_s2, "same call x6, result changes each time (progress)"),
    "s3_alternating": (_s3, "read_file / grep alternating x4, identical results"),
    "s4_healthy": (_s4, "12 different searches"),
    "s5_volatile_args": (_s5, "same call x5 with new request_id/timestamp each time, same result"),
}


def turns(scenario):
    return SCENARIOS[scenario][0]()


def calls(scenario):
    """Every scripted call ``(tool, args, call_id, result)`` in order."""
    return [c for t in turns(scenario) if isinstance(t, list) for c in t]


def tools_used(scenario):
    return sorted({c[0] for c in calls(scenario)})


class ScriptedTools:
    """Returns each tool's scripted results in order (the tool side of the script)."""

    def __init__(self, scenario):
        self.queues = defaultdict(list)
        for tool, _args, _id, result in calls(scenario):
            self.queues[tool].append(result)

    def result(self, tool):
        return self.queues[tool].pop(0)


def tool_functions(scenario):
    """Plain Python functions, one per tool the scenario uses, with typed parameters and
    docstrings (Google style, which every framework here reads); each returns its next
    scripted result."""
    scripted = ScriptedTools(scenario)

    def fetch_url(url: str, limit: int) -> str:
        """Fetch a URL.

        Args:
            url: The URL to fetch.
            limit: How many pages to fetch.
        """
        return scripted.result("fetch_url")

    def check_status(job: str) -> str:
        """Check the status of a job.

        Args:
            job: The job id.
        """
        return scripted.result("check_status")

    def read_file(path: str) -> str:
        """Read a file.

        Args:
            path: The file path.
        """
        return scripted.result("read_file")

    def grep(pattern: str) -> str:
        """Search files for a pattern.

        Args:
            pattern: The text to look for.
        """
        return scripted.result("grep")

    def search(query: str) -> str:
        """Search the web.

        Args:
            query: The search query.
        """
        return scripted.result("search")

    def lookup_user(user_id: str, request_id: str, timestamp: str) -> str:
        """Look up a user.

        Args:
            user_id: The user id.
            request_id: The caller's request id.
            timestamp: When the request was made.
        """
        return scripted.result("lookup_user")

    every = {f.__name__: f for f in (fetch_url, check_status, read_file, grep, search, lookup_user)}
    return [every[name] for name in tools_used(scenario)]


def parse_args(description):
    import argparse

    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--scenario", required=True, choices=list(SCENARIOS))
    ap.add_argument("--out", required=True, help="folder for req-NNNN.pb / .json")
    ap.add_argument("--no-content", action="store_true", help="switch the instrumentation's content capture off")
    ap.add_argument("--instrumentation", default=None)
    return ap.parse_args()


if __name__ == "__main__":
    # `python3 scenarios.py SCENARIO`: the turns as JSON, for recorders in other languages.
    import json
    import sys

    out = []
    for turn in turns(sys.argv[1]):
        if isinstance(turn, str):
            out.append({"text": turn})
        else:
            out.append({"calls": [{"tool": t, "args": a, "id": i, "result": r} for t, a, i, r in turn]})
    json.dump({"turns": out, "tools": {n: TOOLS[n][0] for n in tools_used(sys.argv[1])}}, sys.stdout)
