"""Semantic Kernel (semantic-kernel) with its own GenAI spans.

A ``Kernel`` with the scenario's tools as kernel functions of a ``corpus`` plugin, and a
chat service that is a scripted ``ChatCompletionClientBase`` subclass (function calling
on): each call returns the scenario's next turn as ``FunctionCallContent`` items (or the
final text); SK's own auto-invoke loop runs the functions. Telemetry: SK's experimental
GenAI diagnostics, ``SEMANTICKERNEL_EXPERIMENTAL_GENAI_ENABLE_OTEL_DIAGNOSTICS_SENSITIVE``
(content) or ``..._DIAGNOSTICS`` only (``--no-content``). SK names tools
``<plugin>-<function>`` (``corpus-fetch_url``).
"""
import asyncio
import json
import os

from scenarios import parse_args, tool_functions, turns

args = parse_args(__doc__)
os.environ["SEMANTICKERNEL_EXPERIMENTAL_GENAI_ENABLE_OTEL_DIAGNOSTICS"] = "true"
if not args.no_content:
    os.environ["SEMANTICKERNEL_EXPERIMENTAL_GENAI_ENABLE_OTEL_DIAGNOSTICS_SENSITIVE"] = "true"

from capture import Capture, tracer_provider  # noqa: E402

cap = Capture(args.out)
provider = tracer_provider(cap, "record-semantic-kernel")

from semantic_kernel import Kernel  # noqa: E402
from semantic_kernel.connectors.ai.chat_completion_client_base import ChatCompletionClientBase  # noqa: E402
from semantic_kernel.connectors.ai.function_choice_behavior import FunctionChoiceBehavior  # noqa: E402
from semantic_kernel.connectors.ai.prompt_execution_settings import PromptExecutionSettings  # noqa: E402
from semantic_kernel.contents import AuthorRole, ChatHistory, ChatMessageContent, FunctionCallContent  # noqa: E402
from semantic_kernel.functions import kernel_function  # noqa: E402

script = turns(args.scenario)


class ScriptedChat(ChatCompletionClientBase):
    """Returns the scenario's turns in order; no network."""

    SUPPORTS_FUNCTION_CALLING = True
    step: int = 0

    async def _inner_get_chat_message_contents(self, chat_history, settings):
        turn = script[self.step]
        self.step += 1
        if isinstance(turn, str):
            return [ChatMessageContent(role=AuthorRole.ASSISTANT, content=turn)]
        items = [FunctionCallContent(id=i, name=f"corpus-{t}", arguments=json.dumps(a)) for t, a, i, _r in turn]
        return [ChatMessageContent(role=AuthorRole.ASSISTANT, items=items)]


kernel = Kernel()
for f in tool_functions(args.scenario):
    kernel.add_function(plugin_name="corpus", function=kernel_function(f, name=f.__name__))
service = ScriptedChat(ai_model_id="scripted-fake", service_id="scripted")
kernel.add_service(service)


async def main():
    history = ChatHistory()
    history.add_user_message(f"run scenario {args.scenario}")
    settings = PromptExecutionSettings(
        function_choice_behavior=FunctionChoiceBehavior.Auto(maximum_auto_invoke_attempts=len(script) + 1)
    )
    return await service.get_chat_message_contents(history, settings, kernel=kernel)


result = asyncio.run(main())
provider.shutdown()
cap.stop()
print(f"{args.scenario}: {cap.count} requests, answer {str(result[-1].content)!r:.80}")
