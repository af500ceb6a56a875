/**
 * Vercel AI SDK integration against the real `ai` package (MockLanguageModelV3) and the
 * real loopwatch server.
 */

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { instrument, LoopDetectedError, type Loopwatch } from '@loopwatch/client';
import { runAiAgent, type AiRun } from './helpers/ai-agent.js';
import { requireServerBinary, serverBinaryExists } from './helpers/env.js';
import { KILL_THRESHOLD, ToolLog, WARN_THRESHOLD } from './helpers/loop.js';
import { startServer, type Server } from './helpers/server.js';

describe('Vercel AI SDK', () => {
  let server: Server | undefined;
  let lw: Loopwatch;

  before(async () => {
    if (!serverBinaryExists()) return;
    server = await startServer();
    lw = instrument({ serviceName: 'ts-ai', grpcAddress: server.grpcAddress, adminUrl: server.adminUrl });
  });
  after(async () => {
    await lw?.shutdown();
    await server?.stop();
  });

  test('a looping generateText is stopped by the kill signal within one call', async (t) => {
    if (!requireServerBinary(t)) return;
    // A model taking 20 ms per call (any real one takes longer).
    const run: AiRun = { tools: new ToolLog(), prompts: [], steps: 0, modelDelayMs: 20 };
    const error = await lw.run(() => runAiAgent(run)).then(
      () => undefined,
      (e: unknown) => e,
    );
    assert.ok(error instanceof LoopDetectedError, `expected LoopDetectedError, got ${String(error)}`);
    assert.equal(error.reason, 'kill');
    assert.equal(error.signal?.pattern, 'repeated_result');
    assert.deepEqual(error.signal?.tool_names, ['fetch_url']);
    assert.ok(run.tools.calls >= KILL_THRESHOLD, `only ${run.tools.calls} calls`);
    assert.ok(run.tools.calls <= KILL_THRESHOLD + 1, `${run.tools.calls - KILL_THRESHOLD} calls after the threshold`);
    // The warn signal's nudge reached the model as a user message.
    const nudged = run.prompts.some((p) => JSON.stringify(p).includes('[loopwatch]'));
    assert.ok(nudged, 'no [loopwatch] nudge in any prompt');
  });

  test('with check on, the threshold call is blocked before it runs', async (t) => {
    if (!requireServerBinary(t)) return;
    const run: AiRun = { tools: new ToolLog(), prompts: [], steps: 0 };
    const error = await lw.run(() => runAiAgent(run), { check: true }).then(
      () => undefined,
      (e: unknown) => e,
    );
    assert.ok(error instanceof LoopDetectedError);
    assert.equal(error.reason, 'deny');
    assert.equal(error.check?.decision, 'deny');
    assert.equal(error.check?.pattern, 'repeated_result');
    assert.equal(error.check?.count, KILL_THRESHOLD);
    assert.equal(run.tools.calls, KILL_THRESHOLD - 1);
    // The check's warn at the 3rd call is a nudge the model saw on the following step.
    const firstNudge = run.prompts.findIndex((p) => JSON.stringify(p).includes('[loopwatch]'));
    assert.ok(firstNudge >= WARN_THRESHOLD, `nudge at step ${firstNudge}`);
  });
});
