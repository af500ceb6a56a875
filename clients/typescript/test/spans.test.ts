/**
 * The spans the client writes, captured with the SDK's InMemorySpanExporter through
 * `instrument({ exporter })` (no server needed): attributes of `execute_tool` spans, error
 * status, a blocked call leaving no span, and that a tool span is exported at once.
 */

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { SpanStatusCode } from '@opentelemetry/api';
import { InMemorySpanExporter } from '@opentelemetry/sdk-trace-base';
import { Guard, instrument, traceToolCall, type Signal } from '@loopwatch/client';

const exporter = new InMemorySpanExporter();
// A 60 s batch delay: only the tool-span flush can export within the test.
const lw = instrument({ serviceName: 'ts-spans', exporter, scheduledDelayMillis: 60000 });

test('execute_tool span: GenAI attributes, result as JSON text, exported at once', async () => {
  exporter.reset();
  const value = await traceToolCall(
    { name: 'search', arguments: { q: 'x', n: 2 }, callId: 'call-1' },
    () => ({ hits: [1, 2] }),
    { guard: null },
  );
  assert.deepEqual(value, { hits: [1, 2] });
  await lw.flushed();
  const [span] = exporter.getFinishedSpans();
  assert.ok(span, 'the tool span was not exported');
  assert.equal(span.name, 'execute_tool search');
  assert.equal(span.attributes['gen_ai.operation.name'], 'execute_tool');
  assert.equal(span.attributes['gen_ai.tool.name'], 'search');
  assert.equal(span.attributes['gen_ai.tool.call.id'], 'call-1');
  assert.equal(span.attributes['gen_ai.tool.call.arguments'], '{"q":"x","n":2}');
  assert.equal(span.attributes['gen_ai.tool.call.result'], '{"hits":[1,2]}');
  assert.equal(span.attributes['gen_ai.tool.call.decision'], undefined);
  assert.equal(span.resource.attributes['service.name'], 'ts-spans');
});

test('a throwing tool: status ERROR with its message and error.type; the error is rethrown', async () => {
  exporter.reset();
  await assert.rejects(
    traceToolCall(
      { name: 'fetch_url', arguments: '{"url":"u"}' },
      () => {
        throw new TypeError('connection refused');
      },
      { guard: null },
    ),
    /connection refused/,
  );
  await lw.flushed();
  const [span] = exporter.getFinishedSpans();
  assert.equal(span?.status.code, SpanStatusCode.ERROR);
  assert.equal(span?.status.message, 'connection refused');
  assert.equal(span?.attributes['error.type'], 'TypeError');
  assert.equal(span?.attributes['gen_ai.tool.call.arguments'], '{"url":"u"}');
});

test('a kill signal blocks the next call: no span, the tool never runs, the signal aborts', async () => {
  exporter.reset();
  const trace = '12'.repeat(16);
  // Not started: signals are handed in directly, as an own transport would.
  const guard = new Guard({ traceId: trace, grpcAddress: '127.0.0.1:1', adminUrl: 'http://127.0.0.1:1' });
  const kill: Signal = {
    schema: 'loopwatch.signal.v1', id: 'f'.repeat(32), occurrence: 1, severity: 'kill', time_unix_nano: '1',
    trace_id: trace, run_key: trace, service_name: null, agent_name: null, profile: 'stop', action: 'kill',
    pattern: 'repeated_call', tool_names: ['t'], count: 10, window: 20, fingerprints: [], span_ids: [],
    first_span_id: '', message: 'stop now',
  };
  guard.handleSignal({ ...kill, id: 'e'.repeat(32), trace_id: 'ab'.repeat(16), run_key: 'ab'.repeat(16) });
  assert.equal(guard.stopped, undefined, 'a signal of another trace stopped the run');
  guard.handleSignal(kill);
  guard.handleSignal(kill);
  assert.equal(guard.signals.length, 1, 'a repeated signal id was not de-duplicated');
  let ran = false;
  await assert.rejects(
    traceToolCall({ name: 't' }, () => (ran = true), { guard }),
    (e: Error) => e.name === 'LoopDetectedError' && e.message === 'stop now',
  );
  assert.equal(ran, false);
  assert.equal(guard.signal.aborted, true);
  await lw.forceFlush();
  assert.equal(exporter.getFinishedSpans().length, 0);
  guard.close();
});
