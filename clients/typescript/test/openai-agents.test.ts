/**
 * OpenAI Agents JS integration against the real `@openai/agents` package (ScriptedModel) and the
 * real loopwatch server.
 */

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { instrument, LoopDetectedError, type Loopwatch } from '@loopwatch/client';
import { runAgentsAgent, sawNudge, type AgentsRun } from './helpers/agents-agent.js';
import { requireServerBinary, serverBinaryExists } from './helpers/env.js';
import { KILL_THRESHOLD, ToolLog } from './helpers/loop.js';
import { startServer, type Server } from './helpers/server.js';

describe('OpenAI Agents JS', () => {
  let server: Server | undefined;
  let lw: Loopwatch;

  before(async () => {
    if (!serverBinaryExists()) return;
    server = await startServer();
    lw = instrument({ serviceName: 'ts-openai-agents', grpcAddress: server.grpcAddress, adminUrl: server.adminUrl });
  });
  after(async () => {
    await lw?.shutdown();
    await server?.stop();
  });

  test('a looping Agent run is stopped by the kill signal within one call', async (t) => {
    if (!requireServerBinary(t)) return;
    // A model taking 20 ms per call (any real one takes longer).
    const run: AgentsRun = { tools: new ToolLog(), modelDelayMs: 20 };
    const error = await lw.run(() => runAgentsAgent(run)).then(
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
    assert.ok(sawNudge(run.model), 'no [loopwatch] nudge in any model input');
  });

  test('with check on, the threshold call is blocked before it runs', async (t) => {
    if (!requireServerBinary(t)) return;
    const run: AgentsRun = { tools: new ToolLog() };
    const error = await lw.run(() => runAgentsAgent(run), { check: true }).then(
      () => undefined,
      (e: unknown) => e,
    );
    assert.ok(error instanceof LoopDetectedError);
    assert.equal(error.reason, 'deny');
    assert.equal(error.check?.decision, 'deny');
    assert.equal(error.check?.pattern, 'repeated_result');
    assert.equal(error.check?.count, KILL_THRESHOLD);
    assert.equal(run.tools.calls, KILL_THRESHOLD - 1);
    // The check's warn at the 3rd call is a nudge the model saw on a later turn.
    assert.ok(sawNudge(run.model), 'no [loopwatch] nudge in any model input');
  });
});
