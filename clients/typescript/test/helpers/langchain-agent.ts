/**
 * A looping LangChain.js v1 agent: `createAgent` with LangChain's own fake chat model
 * (`fakeModel()`, which supports tool calling) answering every turn with a `fetch_url`
 * tool call; guarded with `loopwatchMiddleware`.
 */

import { AIMessage, createAgent, createMiddleware, fakeModel, tool, type BaseMessage } from 'langchain';
import { z } from 'zod';
import { loopwatchMiddleware } from '@loopwatch/client/langchain';
import type { Guard } from '@loopwatch/client';
import { ToolLog, URL_ARG } from './loop.js';

export interface LangChainRun {
  tools: ToolLog;
  /** Messages the model was called with, per call. */
  prompts: BaseMessage[][];
  /** Time each model call takes, ms (default 0: answers at once). */
  modelDelayMs?: number;
}

/** A fake model calling fetch_url(URL_ARG) on each of `turns` turns. */
export function loopingFakeModel(prompts: BaseMessage[][], turns = 40) {
  const model = fakeModel();
  for (let i = 1; i <= turns; i++) {
    model.respond((messages: BaseMessage[]) => {
      prompts.push(messages);
      return new AIMessage({ content: '', tool_calls: [{ name: 'fetch_url', args: { url: URL_ARG }, id: `call-${i}`, type: 'tool_call' }] });
    });
  }
  return model;
}

/** Runs the looping agent inside the current `Loopwatch.run` (its guard given). */
export async function runLangChainAgent(r: LangChainRun, guard: Guard): Promise<void> {
  const fetchUrl = tool(async () => r.tools.run(), {
    name: 'fetch_url',
    description: 'Fetch a URL',
    schema: z.object({ url: z.string() }),
  });
  const agent = createAgent({
    model: loopingFakeModel(r.prompts),
    tools: [fetchUrl],
    middleware: [loopwatchMiddleware(), modelLatency(r.modelDelayMs ?? 0)],
  });
  await agent.invoke(
    { messages: [{ role: 'user', content: 'Fetch https://example.com/a and summarise it.' }] },
    { signal: guard.signal, recursionLimit: 200 },
  );
}

/** Whether any model call carried a `[loopwatch]` nudge. */
export function sawNudge(prompts: BaseMessage[][]): boolean {
  return prompts.some((p) => p.some((m) => typeof m.content === 'string' && m.content.includes('[loopwatch]')));
}

/** Makes each model call take `ms` (LangChain's fake model answers synchronously). */
function modelLatency(ms: number) {
  return createMiddleware({
    name: 'model-latency',
    wrapModelCall: async (request, handler) => {
      if (ms > 0) await new Promise((r) => setTimeout(r, ms));
      return handler(request);
    },
  });
}
