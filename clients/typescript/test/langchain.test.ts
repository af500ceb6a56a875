/**
 * LangChain.js v1 integration against the real `langchain` package (fakeModel) and the
 * real loopwatch server.
 */

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { instrument, LoopDetectedError, type Loopwatch } from '@loopwatch/client';
import { runLangChainAgent, sawNudge, type LangChainRun } from './helpers/langchain-agent.js';
import { requireServerBinary, serverBinaryExists } from './helpers/env.js';
import { KILL_THRESHOLD, ToolLog } from './helpers/loop.js';
import { startServer, type Server } from './helpers/server.js';

describe('LangChain.js createAgent', () => {
  let server: Server | undefined;
  let lw: Loopwatch;

  before(async () => {
    if (!serverBinaryExists()) return;
    server = await startServer();
    lw = instrument({ serviceName: 'ts-langchain', grpcAddress: server.grpcAddress, adminUrl: server.adminUrl });
  });
  after(async () => {
    await lw?.shutdown();
    await server?.stop();
  });

  test('a looping createAgent is stopped by the kill signal within one call', async (t) => {
    if (!requireServerBinary(t)) return;
    // A model taking 20 ms per call (any real one takes longer).
    const run: LangChainRun = { tools: new ToolLog(), prompts: [], modelDelayMs: 20 };
    const error = await lw.run((guard) => runLangChainAgent(run, guard)).then(
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
    assert.ok(sawNudge(run.prompts), 'no [loopwatch] nudge in any model call');
  });

  test('with check on, the threshold call is blocked before it runs', async (t) => {
    if (!requireServerBinary(t)) return;
    const run: LangChainRun = { tools: new ToolLog(), prompts: [] };
    const error = await lw.run((guard) => runLangChainAgent(run, guard), { check: true }).then(
      () => undefined,
      (e: unknown) => e,
    );
    assert.ok(error instanceof LoopDetectedError);
    assert.equal(error.reason, 'deny');
    assert.equal(error.check?.decision, 'deny');
    assert.equal(error.check?.pattern, 'repeated_result');
    assert.equal(error.check?.count, KILL_THRESHOLD);
    assert.equal(run.tools.calls, KILL_THRESHOLD - 1);
    // The check's warn at the 3rd call is a nudge the model saw on a later call.
    assert.ok(sawNudge(run.prompts), 'no [loopwatch] nudge in any model call');
  });
});
