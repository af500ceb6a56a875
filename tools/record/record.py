#!/usr/bin/env python3
"""Runs the framework recordings and writes their labels.

    python3 tools/record/record.py [PAIR ...] [--scenario S ...] [--label-only]

For each pair of PAIRS below (default: all) and each scenario, runs
``frameworks/<script>`` in the pair's own environment (``setup.sh`` makes them), which
records one agent run into ``tests/fixtures/corpus/<framework>/<variant>/<scenario>/``.
Then (also with ``--label-only``) writes ``tests/fixtures/corpus/recorded-runs.json``
(what each run is: the scripted call sequence, span count, request files) and
``recorded-expected.json`` (what loopwatch's two profiles must detect), both derived from
the SCRIPT: the scripted calls and results run through the shared reference oracle
(``oracle/reference.py``), never from loopwatch's output.
"""
import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(REPO, "tests", "fixtures", "corpus")
sys.path.insert(0, HERE)
import scenarios  # noqa: E402

# run folder (framework/variant) -> (environment, command, content captured, final tool)
# content captured: True, False, or ARGS_ONLY (arguments recorded, results not).
# environment: a venv under .venvs/ (python) or "node" (node/ with its node_modules).
# final tool: frameworks whose agent ends with a tool call instead of a text answer:
# (tool, arguments, result); "{text}" stands for the scripted final text.
ARGS_ONLY = "args-only"
FINAL_ANSWER = ("final_answer", {"answer": "{text}"}, "{text}")  # smolagents
DSPY_FINISH = ("finish", {}, "Completed.")  # dspy.ReAct
PAIRS = {
    "dspy/openinference": ("dspy", ["frameworks/dspy_oi.py"], True, DSPY_FINISH),
    "smolagents/openinference": ("smolagents", ["frameworks/smolagents_oi.py"], True, FINAL_ANSWER),
    "smolagents/openinference-nocontent": ("smolagents", ["frameworks/smolagents_oi.py", "--no-content"], False, FINAL_ANSWER),
    "langchain/openllmetry": ("lc-openllmetry", ["frameworks/langchain_openllmetry.py"], True, None),
    "langchain/openllmetry-nocontent": ("lc-openllmetry", ["frameworks/langchain_openllmetry.py", "--no-content"], False, None),
    "llamaindex/openinference": ("llamaindex", ["frameworks/llamaindex.py", "--instrumentation", "openinference"], True, None),
    "llamaindex/openllmetry": ("llamaindex", ["frameworks/llamaindex.py", "--instrumentation", "openllmetry"], True, None),
    # OpenLLMetry writes tool.name / tool.arguments even with content off; results go.
    "llamaindex/openllmetry-nocontent": ("llamaindex", ["frameworks/llamaindex.py", "--instrumentation", "openllmetry", "--no-content"], ARGS_ONLY, None),
    "autogen/native": ("autogen", ["frameworks/autogen.py", "--instrumentation", "native"], False, None),
    "autogen/openinference": ("autogen", ["frameworks/autogen.py", "--instrumentation", "openinference"], True, None),
    "openai-agents/openllmetry": ("oa-openllmetry", ["frameworks/openai_agents_openllmetry.py"], True, None),
    "openai-agents/openllmetry-nocontent": ("oa-openllmetry", ["frameworks/openai_agents_openllmetry.py", "--no-content"], False, None),
    "semantic-kernel/native": ("sk", ["frameworks/sk_native.py"], True, None),
    "semantic-kernel/native-nocontent": ("sk", ["frameworks/sk_native.py", "--no-content"], False, None),
    "vercel-ai/native": ("node", ["node/vercel_ai.mjs"], True, None),
    "vercel-ai/native-nocontent": ("node", ["node/vercel_ai.mjs", "--no-content"], False, None),
}
# Frameworks that qualify tool names: the name they report is prefix + the script's name.
TOOL_PREFIX = {"semantic-kernel/": "corpus-"}
SCENARIOS = list(scenarios.SCENARIOS)


def oracle():
    for base in (os.environ.get("LOOPWATCH_ORACLE"), os.path.join(REPO, "..", "shared", "oracle", "reference.py")):
        if base and os.path.exists(base):
            spec = importlib.util.spec_from_file_location("reference", base)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            return mod
    sys.exit("reference.py not found: set LOOPWATCH_ORACLE to the oracle's reference.py")


def script_scenario(scenario, content, final_tool, prefix=""):
    """The oracle scenario of one scripted run: every call with its args and result
    (omitted when content capture is off: invisible to argument-based patterns)."""
    responses = []
    for turn in scenarios.turns(scenario):
        if isinstance(turn, str):
            if final_tool:
                tool, args, result = final_tool
                args = {k: turn if v == "{text}" else v for k, v in args.items()}
                call = {"tool": tool, "args": args, "result": turn if result == "{text}" else result}
                responses.append({"calls": [call]})
            else:
                responses.append({"text": turn})
            continue
        calls = []
        for tool, args, _id, result in turn:
            calls.append({"tool": prefix + tool, "args": args, "result": result})
        responses.append({"calls": calls})
    if content is not True:
        for r in responses:
            for c in r.get("calls", []):
                if content is False:
                    c.pop("args")
                c.pop("result")
            if "text" in r:
                r["text"] = ""
    return {"description": scenario, "responses": responses}


def record(pair, scenario):
    env, cmd, _content, _final = PAIRS[pair]
    out = os.path.join(CORPUS, pair, scenario)
    shutil.rmtree(out, ignore_errors=True)
    envvars = dict(os.environ, PYTHONPATH=HERE)
    argv = ["--scenario", scenario, "--out", out]
    if env == "node":
        # The capture receiver runs in its own process (the `capture` environment).
        capture = subprocess.Popen(
            [os.path.join(HERE, ".venvs", "capture", "bin", "python"), os.path.join(HERE, "capture.py"), out, "0"],
            stdout=subprocess.PIPE, text=True, cwd=HERE,
        )
        port = capture.stdout.readline().split("127.0.0.1:")[1].split()[0]
        argv = ["node", os.path.join(HERE, cmd[0])] + cmd[1:] + argv + ["--endpoint", f"http://127.0.0.1:{port}"]
        print("+", " ".join(argv), flush=True)
        try:
            subprocess.run(argv, check=True, cwd=os.path.join(HERE, "node"), env=envvars)
        finally:
            capture.terminate()
            capture.wait()
        return
    argv = [os.path.join(HERE, ".venvs", env, "bin", "python"), os.path.join(HERE, cmd[0])] + cmd[1:] + argv
    print("+", " ".join(argv), flush=True)
    subprocess.run(argv, check=True, cwd=HERE, env=envvars)


def span_count(folder):
    n = 0
    for f in sorted(os.listdir(folder)):
        if f.endswith(".json"):
            doc = json.load(open(os.path.join(folder, f)))
            for rs in doc.get("resourceSpans", []):
                for ss in rs.get("scopeSpans", []):
                    n += len(ss.get("spans", []))
    return n


def canonical_args(args):
    return json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def label():
    ref = oracle()
    runs, expected = [], {}
    for pair, (_env, _cmd, content, final_tool) in PAIRS.items():
        for scenario in SCENARIOS:
            folder = os.path.join(CORPUS, pair, scenario)
            if not os.path.isdir(folder):
                continue
            prefix = next((p for k, p in TOOL_PREFIX.items() if pair.startswith(k)), "")
            scn = script_scenario(scenario, content, final_tool, prefix)
            calls = [c for r in scn["responses"] for c in r.get("calls", [])]
            full = script_scenario(scenario, True, final_tool, prefix)
            full_calls = [c for r in full["responses"] for c in r.get("calls", [])]
            name = f"{pair}/{scenario}"
            files = sorted(f for f in os.listdir(folder) if f.endswith(".pb"))
            runs.append({
                "run": name,
                "scenario": scenario,
                "intent": scenarios.SCENARIOS[scenario][1],
                "spans": span_count(folder),
                "tool_calls": len(calls),
                "sequence": [
                    f"{c['tool']}({canonical_args(c['args'])})" if content is not False else f"{c['tool']}(?)"
                    for c in full_calls
                ],
                "scripted_call_ids": [c[2] for c in scenarios.calls(scenario)],
                "args_present": content is not False,
                "results_present": content is True,
                "text_responses": sum(1 for r in scn["responses"] if "text" in r),
                "request_files": files,
            })
            expected[name] = {k: ref.run(scn, k) for k in ref.PROFILES}
    with open(os.path.join(CORPUS, "recorded-runs.json"), "w") as f:
        json.dump(runs, f, indent=1, ensure_ascii=False)
        f.write("\n")
    with open(os.path.join(CORPUS, "recorded-expected.json"), "w") as f:
        json.dump(expected, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"labelled {len(runs)} runs")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pairs", nargs="*", help=f"run folders to record (default all): {', '.join(PAIRS)}")
    ap.add_argument("--scenario", action="append", choices=SCENARIOS)
    ap.add_argument("--label-only", action="store_true")
    a = ap.parse_args()
    if not a.label_only:
        for pair in a.pairs or PAIRS:
            for scenario in a.scenario or SCENARIOS:
                record(pair, scenario)
    label()


if __name__ == "__main__":
    main()
