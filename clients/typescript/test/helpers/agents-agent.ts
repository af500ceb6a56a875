/**
 * A looping OpenAI Agents JS agent: the SDK's own `ScriptedModel` (`@openai/agents/testing`)
 * answers every turn with a `fetch_url` function call; guarded with `guardAgent` and
 * `loopwatchRunOptions`. The SDK's own trace export is switched off (no network).
 */

import { Agent, run, setTracingDisabled, tool } from '@openai/agents';
import { functionCall, modelResponder, ScriptedModel } from '@openai/agents/testing';
import { z } from 'zod';
import { guardAgent, loopwatchRunOptions } from '@loopwatch/client/openai-agents';
import { ToolLog, URL_ARG } from './loop.js';

setTracingDisabled(true);

export interface AgentsRun {
  tools: ToolLog;
  model?: ScriptedModel;
  /** Time each model call takes, ms (default 0: answers at once). */
  modelDelayMs?: number;
}

/** A scripted model calling fetch_url(URL_ARG) on each of `turns` turns. */
export function loopingScriptedModel(turns = 40, delayMs = 0): ScriptedModel {
  return new ScriptedModel(
    Array.from({ length: turns }, (_, i) =>
      modelResponder(async () => {
        if (delayMs > 0) await new Promise((r) => setTimeout(r, delayMs));
        return [functionCall('fetch_url', { url: URL_ARG }, { callId: `call-${i + 1}` })];
      }),
    ),
  );
}

/** Runs the looping agent inside the current `Loopwatch.run`. */
export async function runAgentsAgent(r: AgentsRun): Promise<void> {
  r.model = loopingScriptedModel(40, r.modelDelayMs);
  const agent = guardAgent(
    new Agent({
      name: 'fetcher',
      instructions: 'Fetch what the user asks for.',
      model: r.model,
      tools: [
        tool({
          name: 'fetch_url',
          description: 'Fetch a URL',
          parameters: z.object({ url: z.string() }),
          execute: async () => r.tools.run(),
        }),
      ],
    }),
  );
  await run(agent, 'Fetch https://example.com/a and summarise it.', { maxTurns: 50, ...loopwatchRunOptions() });
}

/** Whether any model call was sent a `[loopwatch]` nudge. */
export function sawNudge(model: ScriptedModel | undefined): boolean {
  return (model?.calls ?? []).some((c) => JSON.stringify(c.request.input).includes('[loopwatch]'));
}
