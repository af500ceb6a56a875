/**
 * A looping Vercel AI SDK agent: `generateText` with the SDK's own `MockLanguageModelV3`
 * (from `ai/test`) that asks for `fetch_url` on every step, guarded with `withLoopwatch`.
 */

import { generateText, tool, type ModelMessage } from 'ai';
import { MockLanguageModelV3 } from 'ai/test';
import { z } from 'zod';
import { withLoopwatch } from '@loopwatch/client/ai';
import { ToolLog, URL_ARG } from './loop.js';

/** What the model was sent on each step (to find the nudges). */
export interface AiRun {
  tools: ToolLog;
  prompts: ModelMessage[][];
  steps: number;
  /** Time each model call takes, ms (default 0: answers at once). */
  modelDelayMs?: number;
}

const usage = {
  inputTokens: { total: 10, noCache: 10, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 5, text: 5, reasoning: undefined },
};

/** A model that calls fetch_url(URL_ARG) on every step, `maxCalls` times at most. */
export function loopingModel(prompts: unknown[][], maxCalls = 40, delayMs = 0): MockLanguageModelV3 {
  let n = 0;
  return new MockLanguageModelV3({
    doGenerate: async (options) => {
      prompts.push(options.prompt as unknown[]);
      if (delayMs > 0) await new Promise((r) => setTimeout(r, delayMs));
      n += 1;
      if (n > maxCalls) {
        return { content: [{ type: 'text', text: 'giving up' }], finishReason: { unified: 'stop', raw: 'stop' }, usage, warnings: [] };
      }
      return {
        content: [{ type: 'tool-call', toolCallId: `call-${n}`, toolName: 'fetch_url', input: JSON.stringify({ url: URL_ARG }) }],
        finishReason: { unified: 'tool-calls', raw: 'tool_calls' },
        usage,
        warnings: [],
      };
    },
  });
}

/** Runs the looping agent inside the current `Loopwatch.run`. */
export async function runAiAgent(run: AiRun): Promise<void> {
  const result = await generateText(
    withLoopwatch({
      model: loopingModel(run.prompts as unknown[][], 40, run.modelDelayMs),
      prompt: 'Fetch https://example.com/a and summarise it.',
      tools: {
        fetch_url: tool({
          description: 'Fetch a URL',
          inputSchema: z.object({ url: z.string() }),
          execute: async () => run.tools.run(),
        }),
      },
    }),
  );
  run.steps = result.steps.length;
}
