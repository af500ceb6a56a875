/**
 * Timeliness (issue 30 item 5) with the clients' defaults, per framework, against the real
 * loopwatch server: 20 runs of a looping agent each with the pre-execution check off and
 * on. Figures: tool calls made after the kill threshold (the 6th identical failing call,
 * default `stop` profile), and the time from the end of the threshold call (check off) or
 * of the last allowed call (check on: the threshold call is blocked) to the run being
 * stopped (`Guard.stoppedAtMs`). Printed as `TIMELINESS …` lines; README.md quotes them.
 */

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { instrument, LoopDetectedError, type Guard, type Loopwatch } from '@loopwatch/client';
import { runAiAgent } from './helpers/ai-agent.js';
import { runAgentsAgent } from './helpers/agents-agent.js';
import { percentile, requireServerBinary, serverBinaryExists } from './helpers/env.js';
import { runLangChainAgent } from './helpers/langchain-agent.js';
import { KILL_THRESHOLD, ToolLog } from './helpers/loop.js';
import { startServer, type Server } from './helpers/server.js';

const RUNS = Number(process.env.LOOPWATCH_TIMELINESS_RUNS ?? 20);

type Runner = (tools: ToolLog, guard: Guard, modelDelayMs: number) => Promise<void>;
const FRAMEWORKS: Record<string, Runner> = {
  'ai-sdk': (tools, _guard, modelDelayMs) => runAiAgent({ tools, prompts: [], steps: 0, modelDelayMs }),
  'openai-agents': (tools, _guard, modelDelayMs) => runAgentsAgent({ tools, modelDelayMs }),
  langchain: (tools, guard, modelDelayMs) => runLangChainAgent({ tools, prompts: [], modelDelayMs }, guard),
};

/**
 * The cases: the check on with an instant model (0 calls after the threshold, always);
 * the check off with a model that takes 20 ms (any real model takes longer: at most 1
 * call after the threshold); the check off with an instant model, the worst case, where
 * the agent's next step races loopwatch's signal (reported; at most 2 asserted).
 */
const CASES = [
  { check: true, modelDelayMs: 0, maxAfter: 0 },
  { check: false, modelDelayMs: 20, maxAfter: 1 },
  { check: false, modelDelayMs: 0, maxAfter: 2 },
];

describe('timeliness', () => {
  let server: Server | undefined;
  let lw: Loopwatch;

  before(async () => {
    if (!serverBinaryExists()) return;
    server = await startServer();
    lw = instrument({ serviceName: 'ts-timeliness', grpcAddress: server.grpcAddress, adminUrl: server.adminUrl });
  });
  after(async () => {
    await lw?.shutdown();
    await server?.stop();
  });

  for (const [framework, runAgent] of Object.entries(FRAMEWORKS)) {
    for (const { check, modelDelayMs, maxAfter } of CASES) {
      test(`${framework}, check ${check ? 'on' : 'off'}, model ${modelDelayMs} ms: ${RUNS} runs stopped within ${maxAfter} call(s)`, async (t) => {
        if (!requireServerBinary(t)) return;
        const after: number[] = [];
        const stopMs: number[] = [];
        for (let i = 0; i < RUNS; i++) {
          const tools = new ToolLog();
          let guard: Guard | undefined;
          const error = await lw
            .run(
              (g) => {
                guard = g;
                return runAgent(tools, g, modelDelayMs);
              },
              { check },
            )
            .then(
              () => undefined,
              (e: unknown) => e,
            );
          assert.ok(error instanceof LoopDetectedError, `run ${i}: ${String(error)}`);
          assert.equal(error.reason, check ? 'deny' : 'kill');
          after.push(Math.max(0, tools.calls - KILL_THRESHOLD));
          const from = tools.endOf(check ? KILL_THRESHOLD - 1 : KILL_THRESHOLD);
          assert.ok(from !== undefined && guard?.stoppedAtMs !== undefined);
          stopMs.push(guard.stoppedAtMs - from);
          if (check) assert.equal(tools.calls, KILL_THRESHOLD - 1, `run ${i}: the threshold call ran`);
        }
        const histogram = [0, 1, 2].map((n) => `${n}:${after.filter((a) => a === n).length}`).join(',');
        const line =
          `TIMELINESS framework=${framework} check=${check ? 'on' : 'off'} model_ms=${modelDelayMs} runs=${RUNS} ` +
          `calls_after_threshold{${histogram}} max=${Math.max(...after)} ` +
          `stop_ms p50=${percentile(stopMs, 50).toFixed(2)} p99=${percentile(stopMs, 99).toFixed(2)} max=${Math.max(...stopMs).toFixed(2)}`;
        console.log(line);
        t.diagnostic(line);
        assert.ok(Math.max(...after) <= maxAfter, line);
      });
    }
  }
});
