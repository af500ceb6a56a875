"""LlamaIndex (llama-index-core) + OpenInference or OpenLLMetry.

A ``FunctionAgent`` whose LLM is LlamaIndex's own ``MockFunctionCallingLLM`` with a
response generator that returns the scenario's next turn (``ToolCallBlock``s, or the
final text). ``--instrumentation openinference`` (openinference-instrumentation-llama-index)
or ``openllmetry`` (opentelemetry-instrumentation-llamaindex). Content capture off:
``OPENINFERENCE_HIDE_INPUTS/OUTPUTS`` resp. ``TRACELOOP_TRACE_CONTENT=false``.
"""
import asyncio
import os

from scenarios import parse_args, tool_functions, turns

args = parse_args(__doc__)
if args.no_content:
    os.environ["OPENINFERENCE_HIDE_INPUTS"] = "true"
    os.environ["OPENINFERENCE_HIDE_OUTPUTS"] = "true"
    os.environ["TRACELOOP_TRACE_CONTENT"] = "false"

from capture import Capture, tracer_provider  # noqa: E402
from llama_index.core.agent.workflow import FunctionAgent  # noqa: E402
from llama_index.core.base.llms.types import ChatMessage, TextBlock, ToolCallBlock  # noqa: E402
from llama_index.core.llms.mock import MockFunctionCallingLLM  # noqa: E402
from llama_index.core.tools import FunctionTool  # noqa: E402

cap = Capture(args.out)
provider = tracer_provider(cap, f"record-llamaindex-{args.instrumentation}")
if args.instrumentation == "openinference":
    from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

    LlamaIndexInstrumentor().instrument(tracer_provider=provider)
else:
    from opentelemetry.instrumentation.llamaindex import LlamaIndexInstrumentor

    LlamaIndexInstrumentor().instrument(tracer_provider=provider)

script = turns(args.scenario)
state = {"step": 0}


def scripted(messages, **kwargs):
    """The scenario's next turn; no network."""
    turn = script[state["step"]]
    state["step"] += 1
    if isinstance(turn, str):
        return ChatMessage(role="assistant", blocks=[TextBlock(text=turn)])
    blocks = [ToolCallBlock(tool_call_id=i, tool_name=t, tool_kwargs=a) for t, a, i, _r in turn]
    return ChatMessage(role="assistant", blocks=blocks)


llm = MockFunctionCallingLLM(response_generator=scripted, is_chat_model=True)
tools = [FunctionTool.from_defaults(fn=f) for f in tool_functions(args.scenario)]
agent = FunctionAgent(name="corpus_agent", tools=tools, llm=llm, streaming=False)


async def main():
    return await agent.run(user_msg=f"run scenario {args.scenario}", max_iterations=len(script) + 2)


result = asyncio.run(main())
provider.shutdown()
cap.stop()
print(f"{args.scenario}: {cap.count} requests, answer {str(result)!r:.80}")
