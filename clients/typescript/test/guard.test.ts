/**
 * The guard against the real loopwatch server: both transports, the pre-execution check,
 * approvals, tokens and an unreachable server. The agent here is a hand-written loop of
 * `traceToolCall` (the plain-function integration).
 */

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  Guard,
  instrument,
  LoopDetectedError,
  LoopwatchTransportError,
  traceToolCall,
  type ApprovalRequest,
  type Loopwatch,
  type RunOptions,
} from '@loopwatch/client';
import { requireServerBinary, serverBinaryExists } from './helpers/env.js';
import { ToolLog, URL_ARG } from './helpers/loop.js';
import { startServer, type Server } from './helpers/server.js';

// A pause-for-approval profile at 4 identical results; the kill profile is off, so every
// stop here comes from an approval answer.
const APPROVAL_PROFILE = `
[profiles.approval]
extends = "stop"
action = "require_approval"
repeated_result = 4
[profiles.stop]
enabled = false
`;
const TOKEN = 'ts-client-test-token';

/** Calls fetch_url up to `max` times, `pauseMs` apart (a model's think time). */
async function loop(tools: ToolLog, max: number, pauseMs: number): Promise<void> {
  for (let i = 0; i < max; i++) {
    await traceToolCall({ name: 'fetch_url', arguments: { url: URL_ARG }, callId: `call-${i + 1}` }, () => tools.run());
    await new Promise((r) => setTimeout(r, pauseMs));
  }
}

async function stoppedWith(lw: Loopwatch, tools: ToolLog, options: RunOptions, max = 30, pauseMs = 10): Promise<unknown> {
  return lw.run(() => loop(tools, max, pauseMs), options).then(
    () => undefined,
    (e: unknown) => e,
  );
}

describe('guard', () => {
  let server: Server | undefined;
  let lw: Loopwatch;

  before(async () => {
    if (!serverBinaryExists()) return;
    server = await startServer(APPROVAL_PROFILE);
    lw = instrument({ serviceName: 'ts-guard', grpcAddress: server.grpcAddress, adminUrl: server.adminUrl });
  });
  after(async () => {
    await lw?.shutdown();
    await server?.stop();
  });

  for (const transport of ['grpc', 'http'] as const) {
    test(`${transport}: check of an unknown run allows; a request without tool name is refused`, async (t) => {
      if (!requireServerBinary(t)) return;
      const guard = new Guard({
        traceId: 'ab'.repeat(16),
        grpcAddress: server!.grpcAddress,
        adminUrl: server!.adminUrl,
        transport,
      });
      const answer = await guard.check('fetch_url', { url: URL_ARG });
      assert.deepEqual(answer, { decision: 'allow', pattern: '', count: 0, message: '', profile: '', known_run: false });
      await assert.rejects(guard.check('', {}), (e: unknown) => {
        assert.ok(e instanceof LoopwatchTransportError);
        assert.match(e.message, /tool_name/);
        assert.equal(e.status, transport === 'grpc' ? 3 : 400); // INVALID_ARGUMENT / Bad Request
        return true;
      });
      guard.close();
    });

    test(`${transport}: warn signals become nudges, approval is asked, a denial stops the run`, async (t) => {
      if (!requireServerBinary(t)) return;
      const tools = new ToolLog();
      const warned: string[] = [];
      const asked: ApprovalRequest[] = [];
      const error = await stoppedWith(lw, tools, {
        transport,
        onWarn: (message) => warned.push(message),
        // First detection approved (counters reset), the second denied.
        onApproval: (request) => {
          asked.push(request);
          return asked.length === 1;
        },
      });
      assert.ok(error instanceof LoopDetectedError, `got ${String(error)}`);
      assert.equal(error.reason, 'approval_denied');
      assert.equal(asked.length, 2);
      for (const request of asked) {
        assert.equal(request.signal?.action, 'require_approval');
        assert.equal(request.signal?.profile, 'approval');
        assert.equal(request.signal?.pattern, 'repeated_result');
        assert.equal(request.signal?.count, 4);
        // ns since the epoch kept exactly (19 digits; over 2^53), absent fields null.
        assert.match(request.signal?.time_unix_nano ?? '', /^\d{19}$/);
        assert.equal(request.signal?.service_name, 'ts-guard');
        assert.equal(request.signal?.agent_name, null);
        assert.equal(request.signal?.schema, 'loopwatch.signal.v1');
        assert.equal(request.signal?.span_ids.length, 4);
      }
      // Nudge at 3 identical results; approval at 4; after the approval the counters
      // start again, so the second approval comes 4 calls later; calls made while the
      // signal travels still run (one at most over the gRPC stream, a poll interval's
      // worth over HTTP).
      assert.match(warned[0] ?? '', /same result 3 times/);
      const slack = transport === 'grpc' ? 2 : 12;
      assert.ok(tools.calls >= 8 && tools.calls <= 8 + slack, `${tools.calls} calls`);
      // The denial made loopwatch publish a kill signal for the run.
      await waitFor(() => lwGuardKill(asked[1]!.runKey));
    });
  }

  /** Whether loopwatch published a kill for run `key` (GET /v1/signals). */
  async function lwGuardKill(key: string): Promise<boolean> {
    const guard = new Guard({ traceId: key, adminUrl: server!.adminUrl, grpcAddress: server!.grpcAddress });
    const signals = await guard.admin.signals({ traceId: key, action: 'kill' });
    guard.close();
    return signals.some((s) => s.profile === 'approval' && s.action === 'kill');
  }

  test('check: require_approval before the call; approved calls go on with counters reset', async (t) => {
    if (!requireServerBinary(t)) return;
    const tools = new ToolLog();
    const asked: ApprovalRequest[] = [];
    const error = await stoppedWith(lw, tools, {
      check: true,
      onApproval: (request) => {
        asked.push(request);
        return asked.length === 1;
      },
    });
    assert.ok(error instanceof LoopDetectedError);
    assert.equal(error.reason, 'approval_denied');
    assert.equal(asked.length, 2);
    assert.equal(asked[0]!.check?.decision, 'require_approval');
    assert.equal(asked[0]!.toolName, 'fetch_url');
    assert.deepEqual(asked[0]!.arguments, { url: URL_ARG });
    // Asked before the 4th call; approved, it ran as the first of a fresh count (the
    // counters were reset); the 7th would have been the 4th again: asked and denied.
    assert.equal(tools.calls, 6);
  });

  test('require_approval without a callback: denied at loopwatch, run stopped, signal aborted', async (t) => {
    if (!requireServerBinary(t)) return;
    const tools = new ToolLog();
    let aborted: unknown;
    const error = await lw
      .run(async (guard) => {
        guard.signal.addEventListener('abort', () => (aborted = guard.signal.reason));
        await loop(tools, 30, 10);
      })
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    assert.ok(error instanceof LoopDetectedError);
    assert.equal(error.reason, 'approval_denied');
    assert.equal(aborted, error);
    assert.ok(tools.calls >= 4 && tools.calls <= 5, `${tools.calls} calls`);
  });

  test('admin token: refused without it, accepted with it (gRPC and HTTP)', async (t) => {
    if (!requireServerBinary(t)) return;
    const server2 = await startServer('', { LOOPWATCH_ADMIN__AUTH_TOKEN: TOKEN });
    try {
      for (const transport of ['grpc', 'http'] as const) {
        const open = { traceId: 'cd'.repeat(16), grpcAddress: server2.grpcAddress, adminUrl: server2.adminUrl, transport };
        await assert.rejects(Guard.start(open), (e: unknown) => {
          assert.ok(e instanceof LoopwatchTransportError);
          assert.equal(e.status, transport === 'grpc' ? 16 : 401); // UNAUTHENTICATED
          return true;
        });
        const guard = await Guard.start({ ...open, token: TOKEN });
        assert.equal((await guard.check('fetch_url', { url: URL_ARG })).decision, 'allow');
        guard.close();
      }
    } finally {
      await server2.stop();
    }
  });

  test('a restarted loopwatch: the Watch stream is reopened and the run is still stopped', async (t) => {
    if (!requireServerBinary(t)) return;
    let current = await startServer();
    const restarted = instrument({
      serviceName: 'ts-restart',
      grpcAddress: current.grpcAddress,
      adminUrl: current.adminUrl,
      register: false,
    });
    const tools = new ToolLog();
    const errors: Error[] = [];
    try {
      const error = await restarted
        .run(
          async () => {
            current = await restartOnSamePorts(current);
            await new Promise((r) => setTimeout(r, 2500)); // longer than the reconnect backoff cap
            for (let i = 0; i < 30; i++) {
              await traceToolCall({ name: 'fetch_url', arguments: { url: URL_ARG } }, () => tools.run(), {
                tracer: restarted.tracer,
              });
              await new Promise((r) => setTimeout(r, 20));
            }
          },
          { onError: (e) => errors.push(e) },
        )
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      assert.ok(error instanceof LoopDetectedError, `got ${String(error)}`);
      assert.equal(error.reason, 'kill');
      assert.ok(tools.calls >= 6 && tools.calls <= 7, `${tools.calls} calls`);
      assert.ok(errors.length >= 1, 'the broken stream was not reported to onError');
    } finally {
      await restarted.shutdown();
      await current.stop();
    }
  });

  test('unreachable loopwatch: start rejects with a transport error', async (t) => {
    if (!requireServerBinary(t)) return;
    for (const transport of ['grpc', 'http'] as const) {
      const started = Date.now();
      await assert.rejects(
        Guard.start({ traceId: 'ef'.repeat(16), grpcAddress: '127.0.0.1:1', adminUrl: 'http://127.0.0.1:1', transport }),
        LoopwatchTransportError,
      );
      assert.ok(Date.now() - started < 10000);
    }
  });

  test('bad trace id and addresses are refused up front', () => {
    assert.throws(() => new Guard({ traceId: 'xyz' }), /32 hex/);
    assert.throws(() => new Guard({ traceId: 'ab'.repeat(16), grpcAddress: 'no port' }), /host:port/);
    assert.throws(() => new Guard({ traceId: 'ab'.repeat(16), adminUrl: 'ftp://x' }), /http/);
  });

});

async function restartOnSamePorts(server: Server): Promise<Server> {
  await server.stop();
  return startServer('', {}, server.ports);
}

async function waitFor(condition: () => Promise<boolean>, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 50));
  }
}
