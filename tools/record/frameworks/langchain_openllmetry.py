"""LangChain / LangGraph + OpenLLMetry (opentelemetry-instrumentation-langchain).

LangChain's basic tool-calling loop (``bind_tools``, then ``tool.invoke(tool_call)`` for
each requested call, ``ToolMessage`` back into the history) inside one traced chain, with
a scripted chat model: each call returns the scenario's next turn as an ``AIMessage`` with
``tool_calls`` (or the final text). Not LangGraph: its per-node state snapshots make
OpenLLMetry's requests grow with the square of the run (8 MB for these five runs), and
the corpus already has a LangGraph run (``langchain/openinference``). Content capture off: ``TRACELOOP_TRACE_CONTENT=false`` (OpenLLMetry's switch).
"""
import os

from scenarios import parse_args, tool_functions, turns

args = parse_args(__doc__)
if args.no_content:
    os.environ["TRACELOOP_TRACE_CONTENT"] = "false"

from capture import Capture, tracer_provider  # noqa: E402
from langchain_core.language_models.chat_models import BaseChatModel  # noqa: E402
from langchain_core.messages import AIMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langchain_core.runnables import RunnableLambda  # noqa: E402
from opentelemetry.instrumentation.langchain import LangchainInstrumentor  # noqa: E402

cap = Capture(args.out)
provider = tracer_provider(cap, "record-langchain-openllmetry")
LangchainInstrumentor().instrument(tracer_provider=provider)

script = turns(args.scenario)


class ScriptedChatModel(BaseChatModel):
    """Returns the scenario's turns in order; no network."""

    step: int = 0

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools, **kwargs):
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        turn = script[self.step]
        self.step += 1
        if isinstance(turn, str):
            msg = AIMessage(content=turn)
        else:
            msg = AIMessage(
                content="",
                tool_calls=[{"name": t, "args": a, "id": i, "type": "tool_call"} for t, a, i, _r in turn],
            )
        return ChatResult(generations=[ChatGeneration(message=msg)])


tools = {f.__name__: tool(f) for f in tool_functions(args.scenario)}
model = ScriptedChatModel().bind_tools(list(tools.values()))


def corpus_agent(task):
    messages = [("user", task)]
    while True:
        reply = model.invoke(messages)
        messages.append(reply)
        if not reply.tool_calls:
            return reply.content
        for call in reply.tool_calls:
            messages.append(tools[call["name"]].invoke(call))


RunnableLambda(corpus_agent, name="corpus_agent").invoke(f"run scenario {args.scenario}")
provider.shutdown()
cap.stop()
print(f"{args.scenario}: {cap.count} requests")
