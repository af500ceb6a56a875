// A Vercel AI SDK agent stuck in a loop, stopped by loopwatch.
//
// The model asks for fetch_url(url) on every step and the tool fails the same way every
// time: loopwatch's `nudge` profile warns at the 3rd identical result (the nudge reaches the
// model as a "[loopwatch] …" message) and its `stop` profile kills at the 6th. The model is
// the AI SDK's own MockLanguageModelV3 so this runs without an API key; put your provider's
// model in its place (e.g. openai('gpt-4o')) and nothing else changes.
//
//   LOOPWATCH_GRPC_ADDRESS=127.0.0.1:4317 LOOPWATCH_ADMIN_URL=http://127.0.0.1:8787 node agent.mjs [--check]
//
// --check asks loopwatch before each tool call (gRPC Guard/Check), so the 6th
// call is blocked before it runs. Prints one JSON line: {trace_id, tool_calls, stopped, reason, pattern}.
import { generateText, tool } from 'ai';
import { MockLanguageModelV3 } from 'ai/test';
import { z } from 'zod';
import { instrument, LoopDetectedError } from '@loopwatch/client';
import { withLoopwatch } from '@loopwatch/client/ai';

const check = process.argv.includes('--check');
const lw = instrument({ serviceName: 'example-ai-sdk' }); // 1: tracing to loopwatch

let calls = 0;
const tools = {
  fetch_url: tool({
    description: 'Fetch a URL',
    inputSchema: z.object({ url: z.string() }),
    execute: async () => {
      calls += 1;
      return 'Error: connection refused';
    },
  }),
};

let step = 0;
const model = new MockLanguageModelV3({
  doGenerate: async () => {
    step += 1;
    return {
      content: [{ type: 'tool-call', toolCallId: `call-${step}`, toolName: 'fetch_url', input: JSON.stringify({ url: 'https://example.com/a' }) }],
      finishReason: { unified: 'tool-calls', raw: 'tool_calls' },
      usage: { inputTokens: { total: 10, noCache: 10 }, outputTokens: { total: 5, text: 5 } },
      warnings: [],
    };
  },
});

let traceId = '';
let outcome = { stopped: false, reason: '', pattern: '' };
try {
  await lw.run(async (guard) => { // 2: a run with its guard
    traceId = guard.traceId;
    // 3: the agent call, with loopwatch's tool wrapper, stopWhen, nudges and abort signal
    await generateText(withLoopwatch({ model, tools, prompt: 'Fetch https://example.com/a and summarise it.' }));
  }, { check });
} catch (error) {
  if (!(error instanceof LoopDetectedError)) throw error;
  outcome = { stopped: true, reason: error.reason, pattern: error.pattern };
}
await lw.shutdown();
console.log(JSON.stringify({ trace_id: traceId, tool_calls: calls, ...outcome }));
