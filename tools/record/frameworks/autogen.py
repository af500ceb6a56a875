"""AutoGen AgentChat (autogen-agentchat) with its native GenAI spans or OpenInference.

An ``AssistantAgent`` whose model client is AutoGen's own ``ReplayChatCompletionClient``
replaying the scenario's turns as ``CreateResult``s (``FunctionCall`` lists, then the
final text); ``max_tool_iterations`` lets the agent loop until the text answer.
``--instrumentation native``: autogen-core's own ``execute_tool`` spans only (they carry
no arguments or results). ``openinference``: openinference-instrumentation-autogen-agentchat
as well (it is installed on top of the native spans, as a user would).
"""
import asyncio
import json

from scenarios import parse_args, tool_functions, turns

args = parse_args(__doc__)

from autogen_agentchat.agents import AssistantAgent  # noqa: E402
from autogen_core import FunctionCall  # noqa: E402
from autogen_core.models import CreateResult, ModelFamily, ModelInfo, RequestUsage  # noqa: E402
from autogen_core.tools import FunctionTool  # noqa: E402
from autogen_ext.models.replay import ReplayChatCompletionClient  # noqa: E402
from capture import Capture, tracer_provider  # noqa: E402

cap = Capture(args.out)
provider = tracer_provider(cap, f"record-autogen-{args.instrumentation}")
if args.instrumentation == "openinference":
    from openinference.instrumentation.autogen_agentchat import AutogenAgentChatInstrumentor

    AutogenAgentChatInstrumentor().instrument(tracer_provider=provider)

usage = RequestUsage(prompt_tokens=10, completion_tokens=5)
completions = []
script = turns(args.scenario)
for turn in script:
    if isinstance(turn, str):
        completions.append(CreateResult(finish_reason="stop", content=turn, usage=usage, cached=False))
    else:
        calls = [FunctionCall(id=i, name=t, arguments=json.dumps(a)) for t, a, i, _r in turn]
        completions.append(CreateResult(finish_reason="function_calls", content=calls, usage=usage, cached=False))

client = ReplayChatCompletionClient(
    completions,
    model_info=ModelInfo(vision=False, function_calling=True, json_output=False, family=ModelFamily.UNKNOWN, structured_output=False),
)
tools = [FunctionTool(f, description=f.__doc__.split("\n")[0]) for f in tool_functions(args.scenario)]
agent = AssistantAgent("corpus_agent", model_client=client, tools=tools, max_tool_iterations=len(script) + 1)


async def main():
    result = await agent.run(task=f"run scenario {args.scenario}")
    return result


result = asyncio.run(main())
provider.shutdown()
cap.stop()
print(f"{args.scenario}: {cap.count} requests, last message: {result.messages[-1].content!r:.80}")
