"""smolagents + OpenInference (openinference-instrumentation-smolagents).

A ``ToolCallingAgent`` whose model is a scripted ``smolagents.Model`` subclass returning
the scenario's next turn as a ``ChatMessage`` with tool calls. smolagents ends a run with
its ``final_answer`` tool, so the final text is a ``final_answer(answer=...)`` call (one
more tool call, labelled as such). Content capture off: OpenInference's
``OPENINFERENCE_HIDE_INPUTS`` / ``OPENINFERENCE_HIDE_OUTPUTS``.
"""
import json
import os

from scenarios import parse_args, tool_functions, turns

args = parse_args(__doc__)
if args.no_content:
    os.environ["OPENINFERENCE_HIDE_INPUTS"] = "true"
    os.environ["OPENINFERENCE_HIDE_OUTPUTS"] = "true"

from capture import Capture, tracer_provider  # noqa: E402
from openinference.instrumentation.smolagents import SmolagentsInstrumentor  # noqa: E402
from smolagents import Model, ToolCallingAgent, tool  # noqa: E402
from smolagents.models import ChatMessage, ChatMessageToolCall, ChatMessageToolCallFunction, MessageRole  # noqa: E402

cap = Capture(args.out)
provider = tracer_provider(cap, "record-smolagents-openinference")
SmolagentsInstrumentor().instrument(tracer_provider=provider)

script = turns(args.scenario)


class ScriptedModel(Model):
    """Returns the scenario's turns in order; no network."""

    def __init__(self):
        super().__init__(model_id="scripted-fake")
        self.step = 0

    def generate(self, messages, stop_sequences=None, response_format=None, tools_to_call_from=None, **kwargs):
        turn = script[self.step]
        self.step += 1
        if isinstance(turn, str):
            turn = [("final_answer", {"answer": turn}, f"call_final_{self.step}", None)]
        calls = [
            ChatMessageToolCall(id=i, type="function", function=ChatMessageToolCallFunction(name=t, arguments=json.dumps(a)))
            for t, a, i, _r in turn
        ]
        return ChatMessage(role=MessageRole.ASSISTANT, content="", tool_calls=calls)


agent = ToolCallingAgent(tools=[tool(f) for f in tool_functions(args.scenario)], model=ScriptedModel(), max_steps=len(script) + 2, name="corpus_agent")
answer = agent.run(f"run scenario {args.scenario}")
provider.shutdown()
cap.stop()
print(f"{args.scenario}: {cap.count} requests, answer {answer!r:.80}")
