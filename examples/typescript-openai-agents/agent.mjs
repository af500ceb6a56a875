// An OpenAI Agents JS agent stuck in a loop, stopped by loopwatch.
//
// The model asks for fetch_url(url) on every turn and the tool fails the same way every
// time: loopwatch warns at the 3rd identical result (the nudge reaches the model as a
// "[loopwatch] …" input item) and kills at the 6th (the run rejects with LoopDetectedError).
// The model is the SDK's own ScriptedModel so this runs without an API key; drop the `model`
// line to use your OpenAI model and nothing else changes.
//
//   LOOPWATCH_GRPC_ADDRESS=127.0.0.1:4317 LOOPWATCH_ADMIN_URL=http://127.0.0.1:8787 node agent.mjs [--check]
//
// --check asks loopwatch before each tool call, so the 6th call is blocked before it runs.
// Prints one JSON line: {trace_id, tool_calls, stopped, reason, pattern}.
import { Agent, run, setTracingDisabled, tool } from '@openai/agents';
import { functionCall, modelResponder, ScriptedModel } from '@openai/agents/testing';
import { z } from 'zod';
import { instrument, LoopDetectedError } from '@loopwatch/client';
import { guardAgent, loopwatchRunOptions } from '@loopwatch/client/openai-agents';

setTracingDisabled(true); // the SDK's own trace export goes to OpenAI; loopwatch gets OpenTelemetry spans
const check = process.argv.includes('--check');
const lw = instrument({ serviceName: 'example-openai-agents' }); // 1: tracing to loopwatch

let calls = 0;
const agent = new Agent({
  name: 'fetcher',
  instructions: 'Fetch what the user asks for.',
  model: new ScriptedModel(
    Array.from({ length: 40 }, (_, i) =>
      modelResponder(() => [functionCall('fetch_url', { url: 'https://example.com/a' }, { callId: `call-${i + 1}` })]),
    ),
  ),
  tools: [
    tool({
      name: 'fetch_url',
      description: 'Fetch a URL',
      parameters: z.object({ url: z.string() }),
      execute: async () => {
        calls += 1;
        return 'Error: connection refused';
      },
    }),
  ],
});
guardAgent(agent); // 2: loopwatch's tool guardrails on every function tool

let traceId = '';
let outcome = { stopped: false, reason: '', pattern: '' };
try {
  await lw.run(async (guard) => {
    traceId = guard.traceId;
    // 3: the run, with the guard's abort signal and nudges
    await run(agent, 'Fetch https://example.com/a and summarise it.', { maxTurns: 50, ...loopwatchRunOptions() });
  }, { check });
} catch (error) {
  if (!(error instanceof LoopDetectedError)) throw error;
  outcome = { stopped: true, reason: error.reason, pattern: error.pattern };
}
await lw.shutdown();
console.log(JSON.stringify({ trace_id: traceId, tool_calls: calls, ...outcome }));
