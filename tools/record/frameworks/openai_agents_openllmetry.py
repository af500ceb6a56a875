"""OpenAI Agents SDK + OpenLLMetry (opentelemetry-instrumentation-openai-agents).

An ``Agent`` whose model is a scripted ``agents.models.interface.Model`` subclass: each
call returns the scenario's next turn as ``ResponseFunctionToolCall`` items (or the final
text message). The instrumentation replaces the SDK's own trace processor (which would
upload to OpenAI) with its OpenTelemetry one (``replace_existing_processors=True``).
Content capture off: ``TRACELOOP_TRACE_CONTENT=false``.
"""
import json
import os

from scenarios import parse_args, tool_functions, turns

args = parse_args(__doc__)
if args.no_content:
    os.environ["TRACELOOP_TRACE_CONTENT"] = "false"
os.environ.setdefault("OPENAI_API_KEY", "sk-unused")  # never used: the model is scripted

from agents import Agent, ModelResponse, Runner, Usage, function_tool  # noqa: E402
from agents.models.interface import Model  # noqa: E402
from capture import Capture, tracer_provider  # noqa: E402
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText  # noqa: E402
from opentelemetry.instrumentation.openai_agents import OpenAIAgentsInstrumentor  # noqa: E402

cap = Capture(args.out)
provider = tracer_provider(cap, "record-openai-agents-openllmetry")
OpenAIAgentsInstrumentor(replace_existing_processors=True).instrument(tracer_provider=provider)

script = turns(args.scenario)


class ScriptedModel(Model):
    """Returns the scenario's turns in order; no network."""

    def __init__(self):
        self.step = 0

    async def get_response(self, *a, **kw):
        turn = script[self.step]
        self.step += 1
        if isinstance(turn, str):
            output = [
                ResponseOutputMessage(
                    id=f"msg_{self.step}", type="message", role="assistant", status="completed",
                    content=[ResponseOutputText(type="output_text", text=turn, annotations=[])],
                )
            ]
        else:
            output = [
                ResponseFunctionToolCall(type="function_call", id=f"fc_{i}", call_id=i, name=t, arguments=json.dumps(a))
                for t, a, i, _r in turn
            ]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *a, **kw):
        raise NotImplementedError("the recording does not stream")


agent = Agent(name="corpus_agent", instructions="Run the scenario.", model=ScriptedModel(),
              tools=[function_tool(f) for f in tool_functions(args.scenario)])
result = Runner.run_sync(agent, f"run scenario {args.scenario}", max_turns=len(script) + 2)
provider.shutdown()
cap.stop()
print(f"{args.scenario}: {cap.count} requests, answer {result.final_output!r:.80}")
