// A LangChain.js v1 agent (createAgent) stuck in a loop, stopped by loopwatch.
//
// The model asks for fetch_url(url) on every turn and the tool fails the same way every
// time: loopwatch warns at the 3rd identical result (the nudge is added to the messages as
// "[loopwatch] …") and kills at the 6th (invoke rejects with LoopDetectedError). The model
// is LangChain's own fakeModel() so this runs without an API key; pass your chat model
// (e.g. "openai:gpt-4o") instead and nothing else changes.
//
//   LOOPWATCH_GRPC_ADDRESS=127.0.0.1:4317 LOOPWATCH_ADMIN_URL=http://127.0.0.1:8787 node agent.mjs [--check]
//
// --check asks loopwatch before each tool call, so the 6th call is blocked before it runs.
// Prints one JSON line: {trace_id, tool_calls, stopped, reason, pattern}.
import { AIMessage, createAgent, fakeModel, tool } from 'langchain';
import { z } from 'zod';
import { instrument, LoopDetectedError } from '@loopwatch/client';
import { loopwatchMiddleware } from '@loopwatch/client/langchain';

const check = process.argv.includes('--check');
const lw = instrument({ serviceName: 'example-langchain' }); // 1: tracing to loopwatch

let calls = 0;
const fetchUrl = tool(
  async () => {
    calls += 1;
    return 'Error: connection refused';
  },
  { name: 'fetch_url', description: 'Fetch a URL', schema: z.object({ url: z.string() }) },
);
const model = fakeModel();
for (let i = 1; i <= 40; i++) {
  model.respond(() => new AIMessage({ content: '', tool_calls: [{ name: 'fetch_url', args: { url: 'https://example.com/a' }, id: `call-${i}`, type: 'tool_call' }] }));
}
// 2: the loopwatch middleware
const agent = createAgent({ model, tools: [fetchUrl], middleware: [loopwatchMiddleware()] });

let traceId = '';
let outcome = { stopped: false, reason: '', pattern: '' };
try {
  await lw.run(async (guard) => {
    traceId = guard.traceId;
    // 3: invoke with the guard's abort signal
    await agent.invoke(
      { messages: [{ role: 'user', content: 'Fetch https://example.com/a and summarise it.' }] },
      { signal: guard.signal, recursionLimit: 200 },
    );
  }, { check });
} catch (error) {
  if (!(error instanceof LoopDetectedError)) throw error;
  outcome = { stopped: true, reason: error.reason, pattern: error.pattern };
}
await lw.shutdown();
console.log(JSON.stringify({ trace_id: traceId, tool_calls: calls, ...outcome }));
