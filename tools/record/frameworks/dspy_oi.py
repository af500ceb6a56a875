"""DSPy + OpenInference (openinference-instrumentation-dspy).

A ``dspy.ReAct`` agent whose LM is DSPy's own ``dspy.utils.DummyLM`` answering with the
scenario's turns: each turn is a ReAct step (``next_thought``, ``next_tool_name``,
``next_tool_args``); the final text is DSPy's ``finish`` tool followed by the extract
step's answer. ReAct takes one tool call per step (no parallel calls). Content capture
off: ``OPENINFERENCE_HIDE_INPUTS/OUTPUTS``.
"""
import os

from scenarios import parse_args, tool_functions, turns

args = parse_args(__doc__)
if args.no_content:
    os.environ["OPENINFERENCE_HIDE_INPUTS"] = "true"
    os.environ["OPENINFERENCE_HIDE_OUTPUTS"] = "true"

import dspy  # noqa: E402
from capture import Capture, tracer_provider  # noqa: E402
from dspy.utils import DummyLM  # noqa: E402
from openinference.instrumentation.dspy import DSPyInstrumentor  # noqa: E402

cap = Capture(args.out)
provider = tracer_provider(cap, "record-dspy-openinference")
DSPyInstrumentor().instrument(tracer_provider=provider)

answers = []
final = None
for turn in turns(args.scenario):
    if isinstance(turn, str):
        final = turn
        answers.append({"next_thought": "done", "next_tool_name": "finish", "next_tool_args": {}})
    else:
        for tool, a, _id, _r in turn:
            answers.append({"next_thought": f"call {tool}", "next_tool_name": tool, "next_tool_args": a})
answers.append({"reasoning": "from the tool results", "answer": final})

dspy.configure(lm=DummyLM(answers))
agent = dspy.ReAct("question -> answer", tools=tool_functions(args.scenario), max_iters=len(answers) + 1)
result = agent(question=f"run scenario {args.scenario}")
provider.shutdown()
cap.stop()
print(f"{args.scenario}: {cap.count} requests, answer {result.answer!r:.80}")
