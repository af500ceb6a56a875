/**
 * The `loopwatch.approval` span event: each answer to a `require_approval` (the callback's,
 * or the default deny) recorded in the agent's trace. Spans go both to the real loopwatch
 * (which detects the loop) and to the SDK's InMemorySpanExporter (which the test reads).
 */

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-grpc';
import { InMemorySpanExporter, type ReadableSpan, type SpanExporter } from '@opentelemetry/sdk-trace-base';
import { APPROVAL_EVENT, instrument, LoopDetectedError, STOPPED_EVENT, traceToolCall, type Guard, type Loopwatch } from '@loopwatch/client';
import { requireServerBinary, serverBinaryExists } from './helpers/env.js';
import { ToolLog, URL_ARG } from './helpers/loop.js';
import { startServer, type Server } from './helpers/server.js';

const APPROVAL_PROFILE = `
[profiles.approval]
extends = "stop"
action = "require_approval"
repeated_result = 4
[profiles.stop]
enabled = false
`;

/** Exports to loopwatch and keeps a copy in memory. */
class TeeExporter implements SpanExporter {
  constructor(
    readonly otlp: SpanExporter,
    readonly memory: InMemorySpanExporter,
  ) {}
  export(spans: ReadableSpan[], done: Parameters<SpanExporter['export']>[1]): void {
    this.memory.export(spans, () => undefined);
    this.otlp.export(spans, done);
  }
  shutdown(): Promise<void> {
    return Promise.all([this.otlp.shutdown(), this.memory.shutdown()]).then(() => undefined);
  }
  forceFlush(): Promise<void> {
    return this.otlp.forceFlush?.() ?? Promise.resolve();
  }
}

/** [span name, event attributes] of every `loopwatch.approval` event. */
function approvalEvents(memory: InMemorySpanExporter): [string, Record<string, unknown>][] {
  return memory
    .getFinishedSpans()
    .flatMap((span) => span.events.filter((e) => e.name === APPROVAL_EVENT).map((e) => [span.name, { ...e.attributes }] as [string, Record<string, unknown>]));
}

async function loop(tools: ToolLog, max: number): Promise<void> {
  for (let i = 0; i < max; i++) {
    await traceToolCall({ name: 'fetch_url', arguments: { url: URL_ARG } }, () => tools.run());
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe('approval span events', () => {
  let server: Server | undefined;
  let lw: Loopwatch;
  const memory = new InMemorySpanExporter();

  before(async () => {
    if (!serverBinaryExists()) return;
    server = await startServer(APPROVAL_PROFILE);
    const otlp = new OTLPTraceExporter({ url: `http://${server.grpcAddress}` });
    lw = instrument({
      serviceName: 'ts-approval-events',
      grpcAddress: server.grpcAddress,
      adminUrl: server.adminUrl,
      exporter: new TeeExporter(otlp, memory),
    });
  });
  after(async () => {
    await lw?.shutdown();
    await server?.stop();
  });

  test('check: the approval and the denial are events of the run span', async (t) => {
    if (!requireServerBinary(t)) return;
    memory.reset();
    let asked = 0;
    let traceId = '';
    const error = await lw
      .run(
        async (guard) => {
          traceId = guard.traceId;
          await loop(new ToolLog(), 30);
        },
        { agentName: 'checked', check: true, onApproval: () => ++asked === 1 },
      )
      .catch((e: unknown) => e);
    assert.ok(error instanceof LoopDetectedError && error.reason === 'approval_denied', String(error));
    const common = {
      'loopwatch.run_key': traceId,
      'loop.pattern': 'repeated_result',
      'loop.profile': 'approval',
      'gen_ai.tool.name': 'fetch_url',
    };
    assert.deepEqual(approvalEvents(memory), [
      ['invoke_agent checked', { 'loopwatch.approval.decision': 'approve', ...common }],
      ['invoke_agent checked', { 'loopwatch.approval.decision': 'deny', ...common }],
    ]);
    const runSpans = memory.getFinishedSpans().filter((span) => span.name === 'invoke_agent checked');
    assert.equal(runSpans.length, 1);
    const runSpan = runSpans[0]!;
    assert.equal(runSpan.attributes['loopwatch.stopped'], 'approval_denied');
    assert.deepEqual(
      runSpan.events.filter((e) => e.name === STOPPED_EVENT).map((e) => ({ ...e.attributes })),
      [
        {
          'loopwatch.stop.action': 'approval_denied',
          'loopwatch.stop.pattern': 'repeated_result',
          'loopwatch.stop.message': (error as LoopDetectedError).message,
        },
      ],
    );
  });

  test('signal without a callback: the default denial is recorded with the signal id', async (t) => {
    if (!requireServerBinary(t)) return;
    memory.reset();
    let run: Guard | undefined;
    const error = await lw
      .run(
        async (guard) => {
          run = guard;
          await loop(new ToolLog(), 30);
        },
        { agentName: 'unanswered' },
      )
      .catch((e: unknown) => e);
    assert.ok(error instanceof LoopDetectedError && error.reason === 'approval_denied', String(error));
    const signalId = run!.signals.find((s) => s.action === 'require_approval')?.id;
    assert.match(signalId ?? '', /^[0-9a-f]{32}$/);
    assert.deepEqual(approvalEvents(memory), [
      [
        'invoke_agent unanswered',
        {
          'loopwatch.approval.decision': 'deny',
          'loopwatch.run_key': run!.traceId,
          'loop.pattern': 'repeated_result',
          'loop.profile': 'approval',
          'loopwatch.signal.id': signalId,
        },
      ],
    ]);
  });
});
