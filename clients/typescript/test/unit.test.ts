/** Pure parts of the client: address parsing, tool-span recognition, wire conversion (gRPC and sink JSON). */

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { trace } from '@opentelemetry/api';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { attributeText, isToolSpan, LoopDetectedError, resolveConnection, signalFromJson, signalFromProto } from '@loopwatch/client';

test('resolveConnection: options, env, defaults; bad addresses are refused', () => {
  assert.deepEqual(resolveConnection({}, {}), { grpcTarget: '127.0.0.1:4317', adminUrl: 'http://127.0.0.1:8787', token: undefined });
  assert.deepEqual(
    resolveConnection({}, { LOOPWATCH_GRPC_ADDRESS: 'http://lw:4317/', LOOPWATCH_ADMIN_URL: 'http://lw:8787/', LOOPWATCH_TOKEN: 't' }),
    { grpcTarget: 'lw:4317', adminUrl: 'http://lw:8787', token: 't' },
  );
  assert.equal(resolveConnection({ grpcAddress: '[::1]:4317' }, {}).grpcTarget, '[::1]:4317');
  assert.throws(() => resolveConnection({ grpcAddress: 'lw' }, {}), /host:port/);
  assert.throws(() => resolveConnection({ adminUrl: 'lw:8787' }, {}), /http\(s\) URL/);
});

test('isToolSpan recognises the tool-span conventions loopwatch reads, and nothing else', () => {
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  const tracer = provider.getTracer('t');
  const make = (name: string, attributes: Record<string, string> = {}) => tracer.startSpan(name, { attributes }).end();
  make('execute_tool fetch_url');
  make('whatever', { 'gen_ai.operation.name': 'execute_tool' });
  make('ai.toolCall');
  make('search', { 'openinference.span.kind': 'TOOL' });
  make('search.tool', { 'traceloop.span.kind': 'tool' });
  make('tool.execute x', { 'gen_ai.operation.name': 'tool.execute' });
  make('chat gpt-4o', { 'gen_ai.operation.name': 'chat' });
  make('invoke_agent a', { 'gen_ai.operation.name': 'invoke_agent' });
  make('execute_toolbox');
  const spans = exporter.getFinishedSpans();
  assert.deepEqual(
    spans.map((s) => isToolSpan(s)),
    [true, true, true, true, true, true, false, false, false],
  );
  void trace;
});

test('attributeText: strings as they are, values as JSON', () => {
  assert.equal(attributeText('plain'), 'plain');
  assert.equal(attributeText({ b: 1, a: [1, 'x'] }), '{"b":1,"a":[1,"x"]}');
  assert.equal(attributeText(undefined), '');
  const cyclic: Record<string, unknown> = {};
  cyclic.self = cyclic;
  assert.equal(attributeText(cyclic), '[object Object]');
});

test('signalFromProto: absent optional fields are null, unknown actions are dropped', () => {
  const raw = {
    schema: 'loopwatch.signal.v1', id: 'a'.repeat(32), occurrence: 1, severity: 'kill', time_unix_nano: '1764800000123456789',
    trace_id: 'b'.repeat(32), run_key: 'b'.repeat(32), profile: 'stop', action: 'kill', pattern: 'repeated_result',
    tool_names: ['fetch_url'], count: 6, window: 20, fingerprints: ['c'.repeat(16)], span_ids: ['d'.repeat(16)],
    first_span_id: 'd'.repeat(16), message: 'stop',
  };
  const signal = signalFromProto(raw);
  assert.equal(signal?.service_name, null);
  assert.equal(signal?.agent_name, null);
  assert.equal(signal?.time_unix_nano, '1764800000123456789');
  assert.equal(signalFromProto({ ...raw, service_name: 'svc' })?.service_name, 'svc');
  assert.equal(signalFromProto({ ...raw, action: 'explode' }), undefined);
});

test('LoopDetectedError carries what stopped the run', () => {
  const e = new LoopDetectedError({
    reason: 'deny',
    toolName: 'fetch_url',
    check: { decision: 'deny', pattern: 'repeated_result', count: 6, message: 'same result 6 times', profile: 'stop', known_run: true },
  });
  assert.equal(e.name, 'LoopDetectedError');
  assert.equal(e.pattern, 'repeated_result');
  assert.match(e.message, /blocked fetch_url before it ran: same result 6 times/);
  assert.ok(e instanceof Error);
});

test('signalFromJson: a sink record with its 19-digit time exact; anything else refused with the reason', () => {
  const text =
    '{"schema":"loopwatch.signal.v1","id":"' + 'a'.repeat(32) + '","occurrence":2,"severity":"warn",' +
    '"time_unix_nano":1764800000123456789,"trace_id":"' + 'b'.repeat(32) + '","run_key":"run-7","service_name":null,' +
    '"agent_name":"fetcher","profile":"nudge","action":"warn","pattern":"cycle","tool_names":["a","b"],"count":3,' +
    '"window":20,"fingerprints":["' + 'c'.repeat(16) + '"],"span_ids":["' + 'd'.repeat(16) + '"],"first_span_id":"' +
    'd'.repeat(16) + '","message":"the \\"time_unix_nano\\":1 in a string stays text"}';
  const signal = signalFromJson(text);
  assert.deepEqual(signal, {
    schema: 'loopwatch.signal.v1', id: 'a'.repeat(32), occurrence: 2, severity: 'warn', time_unix_nano: '1764800000123456789',
    trace_id: 'b'.repeat(32), run_key: 'run-7', service_name: null, agent_name: 'fetcher', profile: 'nudge', action: 'warn',
    pattern: 'cycle', tool_names: ['a', 'b'], count: 3, window: 20, fingerprints: ['c'.repeat(16)], span_ids: ['d'.repeat(16)],
    first_span_id: 'd'.repeat(16), message: 'the "time_unix_nano":1 in a string stays text',
  });
  assert.deepEqual(signalFromJson(new TextEncoder().encode(text)), signal);
  const refused = (t: string, reason: RegExp) => assert.throws(() => signalFromJson(t), (e: unknown) => e instanceof TypeError && reason.test(e.message));
  refused('nope', /^not JSON/);
  refused('"text"', /^not a JSON object$/);
  refused('null', /^not a JSON object$/);
  refused(text.replace('loopwatch.signal.v1', 'loopwatch.signal.v2'), /^schema is "loopwatch.signal.v2"/);
  refused(text.replace('"action":"warn"', '"action":"explode"'), /^bad action: "explode"/);
  refused(text.replace('a'.repeat(32), 'A'.repeat(32)), /^bad id/);
  refused(text.replace(`"${'b'.repeat(32)}"`, '"xyz"'), /^bad trace_id/);
  refused(text.replace('"count":3', '"count":-1'), /^bad count/);
  refused(text.replace('"count":3', '"count":"3"'), /^bad count/);
  refused(text.replace('"time_unix_nano":1764800000123456789', '"time_unix_nano":"soon"'), /^bad time_unix_nano/);
  refused(text.replace('"agent_name":"fetcher"', '"agent_name":7'), /^bad agent_name/);
  refused(text.replace('"tool_names":["a","b"]', '"tool_names":"a"'), /^bad tool_names/);
  refused(text.replace('"span_ids":["' + 'd'.repeat(16), '"span_ids":["' + 'd'.repeat(15)), /^bad span_ids/);
});
