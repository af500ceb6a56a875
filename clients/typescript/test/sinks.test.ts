/**
 * The `redis` and `nats` signal transports against the real Redis (127.0.0.1:6379) and NATS
 * (127.0.0.1:4222) servers and the real loopwatch binary, whose `[signals.redis]` and
 * `[signals.nats]` sinks publish to them:
 *
 * - a looping agent (a hand-written `traceToolCall` loop, spans over OTLP) is stopped by the
 *   kill loopwatch publishes, and the guard holds exactly the record loopwatch published;
 * - the pre-execution check goes over gRPC or HTTP to loopwatch;
 * - with messages published by hand through the real clients: what is not a signal is
 *   ignored and reported, the trace / service filter holds, `ready` means subscribed, a
 *   broken connection is re-made, an unreachable server rejects `ready`;
 * - a missing optional package is named in the error.
 *
 * Under CI (env CI set) a missing server or binary fails the test; elsewhere it is skipped.
 */

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import { connect as natsConnect, type NatsConnection } from '@nats-io/transport-node';
import { createClient } from 'redis';
import {
  AdminClient,
  DEFAULT_NATS_SUBJECT_PREFIX,
  DEFAULT_NATS_URL,
  DEFAULT_REDIS_CHANNEL,
  DEFAULT_REDIS_URL,
  Guard,
  instrument,
  LoopDetectedError,
  LoopwatchTransportError,
  NatsTransport,
  RedisTransport,
  traceToolCall,
  type CheckResult,
  type Loopwatch,
  type RunOptions,
  type Signal,
  type SignalTransport,
  type WatchFilter,
} from '@loopwatch/client';
import { requireServerBinary, serverBinaryExists } from './helpers/env.js';
import { KILL_THRESHOLD, ToolLog, URL_ARG } from './helpers/loop.js';
import { REPO_ROOT, startServer, type Server } from './helpers/server.js';
import {
  hostPort,
  NATS_URL,
  reachable,
  REDIS_URL,
  requireReachable,
  sampleSignal,
  signalJson,
  startProxy,
  until,
} from './helpers/sinks.js';

const run = promisify(execFile);
const UNIQUE = `${process.pid}_${Date.now()}`;
const SERVICE = 'ts-sinks';
/** This run's Redis channel, NATS subject prefix and JetStream stream (shared servers). */
const CHANNEL = `loopwatch:ts-client-test:${UNIQUE}`;
const PREFIX = `loopwatch_ts_client_test_${UNIQUE}.signals`;
const STREAM = `LOOPWATCH_TS_CLIENT_TEST_${UNIQUE}`;

/** A raw subscriber and publisher on one sink, with the real client library. */
interface Raw {
  /** Every payload received on the sink's channel / subjects, in order (NATS: with subject). */
  received: { subject: string; data: string }[];
  /** Publishes `text` as loopwatch would (NATS: on `<prefix>.<action>.<service>`). */
  publish(text: string, subject?: string): Promise<void>;
  close(): Promise<void>;
}

interface Sink {
  name: 'redis' | 'nats';
  /** Name in messages and in env LOOPWATCH_TEST_<NAME>_URL. */
  what: 'Redis' | 'NATS';
  url: string;
  /** A transport on this run's channel / prefix at `url`. */
  make(url: string, checker?: SignalTransport): SignalTransport;
  /** `transportOptions` of a guard on this run's channel / prefix. */
  guardOptions: RunOptions['transportOptions'];
  raw(): Promise<Raw>;
}

async function redisRaw(): Promise<Raw> {
  const publisher = createClient({ url: REDIS_URL });
  const subscriber = publisher.duplicate();
  await publisher.connect();
  await subscriber.connect();
  const received: Raw['received'] = [];
  await subscriber.subscribe(CHANNEL, (data: string) => received.push({ subject: CHANNEL, data }));
  return {
    received,
    publish: async (text) => {
      await publisher.publish(CHANNEL, text);
    },
    close: async () => {
      await subscriber.close();
      await publisher.close();
    },
  };
}

async function natsRaw(): Promise<Raw> {
  const nc: NatsConnection = await natsConnect({ servers: NATS_URL });
  const received: Raw['received'] = [];
  nc.subscribe(`${PREFIX}.>`, {
    callback: (error, msg) => {
      if (!error) received.push({ subject: msg.subject, data: msg.string() });
    },
  });
  await nc.flush();
  return {
    received,
    publish: async (text, subject = `${PREFIX}.kill.svc-a`) => {
      nc.publish(subject, text);
      await nc.flush();
    },
    close: () => nc.close(),
  };
}

const SINKS: Sink[] = [
  {
    name: 'redis',
    what: 'Redis',
    url: REDIS_URL,
    make: (url, checker) => new RedisTransport({ url, channel: CHANNEL, checker, reconnectDelayMs: 50 }),
    guardOptions: { url: REDIS_URL, channel: CHANNEL },
    raw: redisRaw,
  },
  {
    name: 'nats',
    what: 'NATS',
    url: NATS_URL,
    make: (url, checker) => new NatsTransport({ url, subjectPrefix: PREFIX, checker, reconnectDelayMs: 50 }),
    guardOptions: { url: NATS_URL, subjectPrefix: PREFIX },
    raw: natsRaw,
  },
];

/** What a subscription's handlers were called with. */
class Recorder {
  readonly signals: Signal[] = [];
  readonly errors: Error[] = [];
  reconnects = 0;
  readonly handlers = {
    onSignal: (s: Signal) => void this.signals.push(s),
    onError: (e: Error) => void this.errors.push(e),
    onReconnect: () => void (this.reconnects += 1),
  };
}

/** `url` with its port replaced (to go through a proxy, or to a closed port). */
function withPort(url: string, port: number): string {
  const parsed = new URL(url);
  return `${parsed.protocol}//${parsed.hostname}:${port}`;
}

describe('redis and nats signal transports', () => {
  let server: Server | undefined;
  let lw: Loopwatch;

  before(async () => {
    if (!serverBinaryExists()) return;
    // Both sinks on one loopwatch; NATS through JetStream (loopwatch's default), in a
    // stream of this run's own, deleted afterwards.
    server = await startServer(
      `[signals.redis]\nurl = "${REDIS_URL}"\nchannel = "${CHANNEL}"\nkill_ttl = "1m"\n` +
        `[signals.nats]\nurl = "${NATS_URL}"\nsubject_prefix = "${PREFIX}"\nstream = "${STREAM}"\nstream_max_age = "1h"\n`,
    );
    lw = instrument({ serviceName: SERVICE, grpcAddress: server.grpcAddress, adminUrl: server.adminUrl });
  });
  after(async () => {
    await lw?.shutdown();
    await server?.stop();
    if (await reachable(NATS_URL)) {
      const nc = await natsConnect({ servers: NATS_URL });
      await nc.request(`$JS.API.STREAM.DELETE.${STREAM}`, '', { timeout: 2000 }).catch(() => undefined);
      await nc.close();
    }
  });

  /** Runs fetch_url in a loop (50 ms tools, as a real tool takes) inside `lw.run`. */
  async function loopRun(tools: ToolLog, options: RunOptions): Promise<{ error: unknown; traceId: string }> {
    let traceId = '';
    const error = await lw
      .run(async (guard) => {
        traceId = guard.traceId;
        for (let i = 0; i < 30; i++) {
          await traceToolCall({ name: 'fetch_url', arguments: { url: URL_ARG }, callId: `call-${i + 1}` }, async () => {
            await new Promise((r) => setTimeout(r, 50));
            return tools.run();
          });
        }
      }, options)
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    return { error, traceId };
  }

  for (const sink of SINKS) {
    test(`${sink.name}: a looping agent is stopped by the kill loopwatch publishes to ${sink.what}; the guard holds that exact record`, async (t) => {
      if (!requireServerBinary(t) || !(await requireReachable(t, sink.url, sink.what))) return;
      const raw = await sink.raw();
      try {
        const tools = new ToolLog();
        const errors: Error[] = [];
        const { error, traceId } = await loopRun(tools, {
          transport: sink.name,
          transportOptions: sink.guardOptions,
          onError: (e) => errors.push(e),
        });
        assert.ok(error instanceof LoopDetectedError, `got ${String(error)}\n${server!.log()}`);
        assert.equal(error.reason, 'kill');
        const signal = error.signal!;
        assert.equal(signal.trace_id, traceId);
        assert.equal(signal.run_key, traceId);
        assert.equal(signal.action, 'kill');
        assert.equal(signal.pattern, 'repeated_result');
        assert.equal(signal.profile, 'stop');
        assert.equal(signal.count, KILL_THRESHOLD);
        assert.equal(signal.service_name, SERVICE);
        assert.deepEqual(signal.tool_names, ['fetch_url']);
        assert.equal(signal.span_ids.length, KILL_THRESHOLD);
        assert.match(signal.time_unix_nano, /^\d{19}$/);
        // The kill comes within one 50 ms call of the threshold.
        assert.ok(tools.calls >= KILL_THRESHOLD && tools.calls <= KILL_THRESHOLD + 1, `${tools.calls} calls`);
        assert.deepEqual(errors, []);

        // Exactly what loopwatch published on the sink (the warn of the nudge profile
        // at 3 came first, on the same channel / prefix).
        await until(() => raw.received.some((m) => m.data.includes(signal.id)), 5000, 'the raw subscriber saw the kill');
        const published = raw.received.find((m) => m.data.includes(signal.id))!;
        const digits = /"time_unix_nano":(\d+)/.exec(published.data)?.[1];
        assert.equal(digits, signal.time_unix_nano, 'time_unix_nano kept to the last digit');
        assert.deepEqual(signal, { ...(JSON.parse(published.data) as Signal), time_unix_nano: digits });
        if (sink.name === 'nats') assert.equal(published.subject, `${PREFIX}.kill.${SERVICE}`);
        const warn = raw.received.map((m) => JSON.parse(m.data) as Signal).find((s) => s.trace_id === traceId && s.action === 'warn');
        assert.equal(warn?.profile, 'nudge');
        // …and what loopwatch itself lists for the run.
        const listed = await new AdminClient(server!.adminUrl).signals({ traceId, action: 'kill' });
        assert.deepEqual(
          listed.map((s) => s.id),
          [signal.id],
        );
      } finally {
        await raw.close();
      }
    });

    for (const checkTransport of ['grpc', 'http'] as const) {
      test(`${sink.name}: the pre-execution check goes to loopwatch over ${checkTransport}: the threshold call is denied before it runs`, async (t) => {
        if (!requireServerBinary(t) || !(await requireReachable(t, sink.url, sink.what))) return;
        const tools = new ToolLog();
        const checks: CheckResult[] = [];
        const { error } = await loopRun(tools, {
          transport: sink.name,
          transportOptions: sink.guardOptions,
          checkTransport,
          check: true,
          onWarn: (_message, source) => source.check && checks.push(source.check),
        });
        assert.ok(error instanceof LoopDetectedError, `got ${String(error)}`);
        assert.equal(error.reason, 'deny');
        assert.equal(error.toolName, 'fetch_url');
        assert.equal(error.check?.decision, 'deny');
        assert.equal(error.check?.pattern, 'repeated_result');
        assert.equal(error.check?.profile, 'stop');
        assert.equal(error.check?.count, KILL_THRESHOLD);
        assert.equal(tools.calls, KILL_THRESHOLD - 1);
        // The nudge profile's warn was answered by the check too (before the 3rd call).
        assert.equal(checks[0]?.decision, 'warn');
        assert.equal(checks[0]?.profile, 'nudge');
      });
    }

    test(`${sink.name}: check() without a checker rejects; with one it is that transport's answer`, async (t) => {
      if (!requireServerBinary(t)) return;
      const bare = sink.make(sink.url);
      await assert.rejects(bare.check({ trace_id: 'ab'.repeat(16), tool_name: 'fetch_url' }, 1000), (e: unknown) => {
        assert.ok(e instanceof LoopwatchTransportError);
        assert.match(e.message, new RegExp(`the ${sink.name} signal transport cannot make the pre-execution check`));
        return true;
      });
      bare.close();
      const guard = new Guard({
        traceId: 'ab'.repeat(16),
        grpcAddress: server!.grpcAddress,
        adminUrl: server!.adminUrl,
        transport: sink.name,
        transportOptions: sink.guardOptions,
      });
      assert.deepEqual(await guard.check('fetch_url', { url: URL_ARG }), {
        decision: 'allow',
        pattern: '',
        count: 0,
        message: '',
        profile: '',
        known_run: false,
      });
      guard.close();
    });

    test(`${sink.name}: messages that are not signals are ignored and reported; the trace and service filter holds`, async (t) => {
      if (!(await requireReachable(t, sink.url, sink.what))) return;
      const raw = await sink.raw();
      const transport = sink.make(sink.url);
      const recorder = new Recorder();
      const traceId = 'e5'.repeat(16);
      const filter: WatchFilter = { traceId: traceId.toUpperCase(), serviceName: 'svc-a' };
      const subscription = transport.watch(filter, recorder.handlers);
      try {
        // ready means subscribed: what is published right after it arrives.
        await subscription.ready;
        const wanted = sampleSignal({ id: '01'.repeat(16), trace_id: traceId, run_key: traceId });
        const last = sampleSignal({ id: '02'.repeat(16), trace_id: traceId, run_key: traceId, action: 'warn', severity: 'warn' });
        await raw.publish('not json at all');
        await raw.publish('{"schema":"something.else","id":"x"}');
        await raw.publish('[1,2,3]');
        await raw.publish(signalJson({ ...wanted, id: 'ff'.repeat(17) })); // an id of 34 chars
        await raw.publish(signalJson(sampleSignal({ id: '03'.repeat(16) }))); // another trace
        await raw.publish(signalJson({ ...wanted, id: '04'.repeat(16), service_name: 'svc-b' })); // another service
        await raw.publish(signalJson({ ...wanted, id: '05'.repeat(16), service_name: null })); // no service
        await raw.publish(signalJson(wanted));
        await raw.publish(signalJson(last));
        await until(() => recorder.signals.some((s) => s.id === last.id), 5000, 'the last signal');
        assert.deepEqual(recorder.signals, [wanted, last]);
        assert.equal(recorder.signals[0]!.time_unix_nano, '1764800000123456789');
        assert.equal(recorder.errors.length, 4, recorder.errors.map((e) => e.message).join('\n'));
        for (const e of recorder.errors) {
          assert.ok(e instanceof LoopwatchTransportError);
          assert.match(e.message, new RegExp(`^loopwatch ${sink.what}: ignoring a message that is not a signal: `));
        }
        assert.match(recorder.errors[0]!.message, /not JSON/);
        assert.match(recorder.errors[1]!.message, /schema is "something.else"/);
        assert.match(recorder.errors[2]!.message, /not a JSON object/);
        assert.match(recorder.errors[3]!.message, /bad id/);
        assert.equal(recorder.reconnects, 0);
        // Nothing after close.
        subscription.close();
        await raw.publish(signalJson({ ...wanted, id: '06'.repeat(16) }));
        await new Promise((r) => setTimeout(r, 200));
        assert.equal(recorder.signals.length, 2);
      } finally {
        subscription.close();
        transport.close();
        await raw.close();
      }
    });

    test(`${sink.name}: without onError a message that is not a signal becomes a process warning`, async (t) => {
      if (!(await requireReachable(t, sink.url, sink.what))) return;
      const raw = await sink.raw();
      const transport = sink.make(sink.url);
      const signals: Signal[] = [];
      const warnings: Error[] = [];
      const onWarning = (w: Error): void => void warnings.push(w);
      process.on('warning', onWarning);
      const subscription = transport.watch({}, { onSignal: (s) => signals.push(s) });
      try {
        await subscription.ready;
        await raw.publish('{"schema":"loopwatch.signal.v1","action":"explode"}');
        await raw.publish(signalJson(sampleSignal({ id: '07'.repeat(16) })));
        await until(() => signals.length === 1 && warnings.length === 1, 5000, 'the signal and the warning');
        assert.equal((warnings[0] as Error & { code?: string }).code, 'LOOPWATCH_SIGNAL_TRANSPORT');
        assert.match(warnings[0]!.message, /ignoring a message that is not a signal: bad action: "explode"/);
        assert.equal(signals[0]!.id, '07'.repeat(16));
      } finally {
        process.off('warning', onWarning);
        subscription.close();
        transport.close();
        await raw.close();
      }
    });

    test(`${sink.name}: ready waits for the server's confirmation: with every client write held back 300 ms, a signal published at ready still arrives`, async (t) => {
      if (!(await requireReachable(t, sink.url, sink.what))) return;
      const proxy = await startProxy(hostPort(sink.url), 300);
      const raw = await sink.raw();
      const transport = sink.make(withPort(sink.url, proxy.port));
      const recorder = new Recorder();
      const started = Date.now();
      const subscription = transport.watch({}, recorder.handlers);
      try {
        await subscription.ready;
        // The subscribe request alone took 300 ms to reach the server.
        assert.ok(Date.now() - started >= 300, `ready after ${Date.now() - started} ms`);
        await raw.publish(signalJson(sampleSignal({ id: '21'.repeat(16) })));
        await until(() => recorder.signals.length === 1, 5000, 'the signal published at ready');
        assert.equal(recorder.signals[0]!.id, '21'.repeat(16));
        assert.deepEqual(recorder.errors, []);
      } finally {
        subscription.close();
        transport.close();
        await raw.close();
        await proxy.close();
      }
    });

    test(`${sink.name}: a broken connection is reported, re-made with onReconnect, and signals flow again`, async (t) => {
      if (!(await requireReachable(t, sink.url, sink.what))) return;
      const proxy = await startProxy(hostPort(sink.url));
      const raw = await sink.raw();
      const transport = sink.make(withPort(sink.url, proxy.port));
      const recorder = new Recorder();
      const subscription = transport.watch({}, recorder.handlers);
      try {
        await subscription.ready;
        await raw.publish(signalJson(sampleSignal({ id: '11'.repeat(16) })));
        await until(() => recorder.signals.length === 1, 5000, 'the first signal');
        proxy.drop();
        await until(() => recorder.reconnects === 1, 10000, 'the reconnection');
        assert.ok(recorder.errors.length >= 1, 'the broken connection was not reported');
        assert.ok(recorder.errors[0] instanceof LoopwatchTransportError);
        assert.match(recorder.errors[0]!.message, new RegExp(`^loopwatch ${sink.what}: `));
        assert.equal(proxy.connections, 2);
        await raw.publish(signalJson(sampleSignal({ id: '12'.repeat(16) })));
        await until(() => recorder.signals.length === 2, 5000, 'the signal after the reconnection');
        assert.deepEqual(
          recorder.signals.map((s) => s.id),
          ['11'.repeat(16), '12'.repeat(16)],
        );
      } finally {
        subscription.close();
        transport.close();
        await raw.close();
        await proxy.close();
      }
    });

    test(`${sink.name}: an unreachable server rejects ready with a LoopwatchTransportError; so does Guard.start`, async () => {
      const started = Date.now();
      const recorder = new Recorder();
      const subscription = sink.make(withPort(sink.url, 1)).watch({}, recorder.handlers);
      await assert.rejects(subscription.ready, (e: unknown) => {
        assert.ok(e instanceof LoopwatchTransportError, String(e));
        assert.match(e.message, new RegExp(`^loopwatch ${sink.what}: `));
        return true;
      });
      assert.deepEqual(recorder.errors, []);
      await assert.rejects(
        Guard.start({
          traceId: 'ef'.repeat(16),
          transport: sink.name,
          transportOptions: { url: withPort(sink.url, 1), connectTimeoutMs: 2000 },
        }),
        LoopwatchTransportError,
      );
      assert.ok(Date.now() - started < 10000, `${Date.now() - started} ms`);
    });
  }

  test('defaults: URLs from loopwatch\'s env variables, else loopback; loopwatch\'s channel and subject prefix', () => {
    const saved = { redis: process.env.LOOPWATCH_SIGNALS__REDIS__URL, nats: process.env.LOOPWATCH_SIGNALS__NATS__URL };
    try {
      delete process.env.LOOPWATCH_SIGNALS__REDIS__URL;
      delete process.env.LOOPWATCH_SIGNALS__NATS__URL;
      const redis = new RedisTransport();
      const nats = new NatsTransport();
      assert.equal(redis.url, 'redis://127.0.0.1:6379');
      assert.equal(redis.url, DEFAULT_REDIS_URL);
      assert.equal(redis.channel, 'loopwatch:signals');
      assert.equal(redis.channel, DEFAULT_REDIS_CHANNEL);
      assert.equal(redis.kind, 'redis');
      assert.equal(nats.url, 'nats://127.0.0.1:4222');
      assert.equal(nats.url, DEFAULT_NATS_URL);
      assert.equal(nats.subject, 'loopwatch.signals.>');
      assert.equal(nats.subject, `${DEFAULT_NATS_SUBJECT_PREFIX}.>`);
      assert.equal(nats.kind, 'nats');
      process.env.LOOPWATCH_SIGNALS__REDIS__URL = 'redis://127.0.0.2:6380';
      process.env.LOOPWATCH_SIGNALS__NATS__URL = 'nats://127.0.0.2:4223';
      assert.equal(new RedisTransport().url, 'redis://127.0.0.2:6380');
      assert.equal(new NatsTransport().url, 'nats://127.0.0.2:4223');
      assert.equal(new RedisTransport({ url: 'redis://127.0.0.3:1' }).url, 'redis://127.0.0.3:1');
      assert.equal(new NatsTransport({ subjectPrefix: 'lw' }).subject, 'lw.>');
    } finally {
      for (const [key, value] of [
        ['LOOPWATCH_SIGNALS__REDIS__URL', saved.redis],
        ['LOOPWATCH_SIGNALS__NATS__URL', saved.nats],
      ] as const) {
        if (value === undefined) delete process.env[key];
        else process.env[key] = value;
      }
    }
  });

  test('an unknown transport name is refused up front', () => {
    assert.throws(
      () => new Guard({ traceId: 'ab'.repeat(16), transport: 'kafka' as unknown as 'grpc' }),
      /transport must be grpc, http, redis or nats, got "kafka"/,
    );
  });

  test('without the optional packages: the error names the package to install; the other transports still load', async () => {
    // A resolve hook hides `redis` and `@nats-io/transport-node` from a child Node process.
    const dir = mkdtempSync(join(tmpdir(), 'loopwatch-ts-hooks-'));
    try {
      writeFileSync(
        join(dir, 'hooks.mjs'),
        `const HIDDEN = new Set(['redis', '@nats-io/transport-node']);
export async function resolve(specifier, context, next) {
  if (HIDDEN.has(specifier)) {
    const error = new Error(\`Cannot find package '\${specifier}' imported from \${context.parentURL}\`);
    error.code = 'ERR_MODULE_NOT_FOUND';
    throw error;
  }
  return next(specifier, context);
}
`,
      );
      writeFileSync(join(dir, 'register.mjs'), `import { register } from 'node:module';\nregister('./hooks.mjs', import.meta.url);\n`);
      const script = `
import { Guard, MISSING_PACKAGE } from '@loopwatch/client';
const out = {};
for (const transport of ['redis', 'nats']) {
  try { new Guard({ traceId: 'ab'.repeat(16), transport }); out[transport] = 'constructed'; }
  catch (e) { out[transport] = { code: e.code, message: e.message, isMissing: e.code === MISSING_PACKAGE }; }
}
const grpc = new Guard({ traceId: 'ab'.repeat(16) });
out.grpc = grpc.traceId;
grpc.close();
console.log(JSON.stringify(out));
`;
      const { stdout } = await run(process.execPath, ['--import', join(dir, 'register.mjs'), '--input-type=module', '-e', script], {
        cwd: join(REPO_ROOT, 'clients', 'typescript'),
      });
      const out = JSON.parse(stdout) as Record<string, { code: string; message: string; isMissing: boolean } | string>;
      assert.deepEqual(out.redis, {
        code: 'LOOPWATCH_MISSING_PACKAGE',
        message: 'the redis signal transport needs the optional package `redis`: npm install redis',
        isMissing: true,
      });
      assert.deepEqual(out.nats, {
        code: 'LOOPWATCH_MISSING_PACKAGE',
        message: 'the nats signal transport needs the optional package `@nats-io/transport-node`: npm install @nats-io/transport-node',
        isMissing: true,
      });
      assert.equal(out.grpc, 'ab'.repeat(16));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
