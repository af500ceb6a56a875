/**
 * The real Redis and NATS the sink-transport tests use (loopback only: env
 * LOOPWATCH_TEST_REDIS_URL, default redis://127.0.0.1:6379; LOOPWATCH_TEST_NATS_URL,
 * default nats://127.0.0.1:4222, as the Python client's tests), a TCP proxy to break a
 * transport's connection on purpose, and signal records to publish by hand.
 */

import { connect as tcpConnect, createServer, type Server as NetServer, type Socket } from 'node:net';
import type { TestContext } from 'node:test';
import type { Signal } from '@loopwatch/client';

export const REDIS_URL = process.env.LOOPWATCH_TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
export const NATS_URL = process.env.LOOPWATCH_TEST_NATS_URL ?? 'nats://127.0.0.1:4222';

/** Host and port of a `scheme://host:port` URL. */
export function hostPort(url: string): { host: string; port: number } {
  const parsed = new URL(url);
  return { host: parsed.hostname, port: Number(parsed.port) };
}

/** Whether a TCP connection to `url`'s host:port succeeds within 1 s. */
export function reachable(url: string): Promise<boolean> {
  const { host, port } = hostPort(url);
  return new Promise((resolve) => {
    const socket = tcpConnect({ host, port, timeout: 1000 });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('timeout', () => {
      socket.destroy();
      resolve(false);
    });
    socket.once('error', () => resolve(false));
  });
}

/**
 * True when the server at `url` answers; else skips the test (locally) or throws (under
 * CI, env CI set), like `requireServerBinary`.
 */
export async function requireReachable(t: TestContext, url: string, what: string): Promise<boolean> {
  if (await reachable(url)) return true;
  const reason = `${what} not reachable at ${url} (start it, or set LOOPWATCH_TEST_${what.toUpperCase()}_URL)`;
  if (process.env.CI) throw new Error(reason);
  t.skip(reason);
  return false;
}

/** A loopback TCP proxy to `target`: `drop()` cuts every connection through it. */
export interface TcpProxy {
  port: number;
  /** Connections made through the proxy so far. */
  connections: number;
  drop(): void;
  close(): Promise<void>;
}

/**
 * Starts a proxy to `target` on a free loopback port. `upstreamDelayMs` holds back what the
 * client sends by that long (in order), so a client that trusted its own write before the
 * server's answer would be caught out.
 */
export async function startProxy(target: { host: string; port: number }, upstreamDelayMs = 0): Promise<TcpProxy> {
  const sockets = new Set<Socket>();
  const server: NetServer = createServer((client) => {
    proxy.connections += 1;
    const upstream = tcpConnect(target);
    sockets.add(client);
    sockets.add(upstream);
    if (upstreamDelayMs > 0) {
      client.on('data', (chunk: Buffer) => {
        setTimeout(() => {
          if (!upstream.destroyed) upstream.write(chunk);
        }, upstreamDelayMs);
      });
    } else {
      client.pipe(upstream);
    }
    upstream.pipe(client);
    const end = (): void => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on('error', end);
    upstream.on('error', end);
    client.on('close', end);
    upstream.on('close', end);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  const proxy: TcpProxy = {
    port: typeof address === 'object' && address ? address.port : 0,
    connections: 0,
    drop: () => {
      for (const socket of sockets) socket.destroy();
      sockets.clear();
    },
    close: async () => {
      proxy.drop();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  return proxy;
}

/** A valid `loopwatch.signal.v1` record (a kill of `repeated_result`), with `overrides`. */
export function sampleSignal(overrides: Partial<Signal> = {}): Signal {
  return {
    schema: 'loopwatch.signal.v1',
    id: 'a1'.repeat(16),
    occurrence: 1,
    severity: 'kill',
    time_unix_nano: '1764800000123456789',
    trace_id: 'b2'.repeat(16),
    run_key: 'b2'.repeat(16),
    service_name: 'svc-a',
    agent_name: null,
    profile: 'stop',
    action: 'kill',
    pattern: 'repeated_result',
    tool_names: ['fetch_url'],
    count: 6,
    window: 20,
    fingerprints: ['c3'.repeat(8)],
    span_ids: ['d4'.repeat(8)],
    first_span_id: 'd4'.repeat(8),
    message: 'The same call returned the same result 6 times.',
    ...overrides,
  };
}

/** The JSON text loopwatch writes for `signal` (time_unix_nano as a JSON integer). */
export function signalJson(signal: Signal): string {
  return JSON.stringify(signal).replace(/"time_unix_nano":"(\d+)"/, '"time_unix_nano":$1');
}

/** Resolves when `condition()` holds, polling every 20 ms; rejects after `timeoutMs`. */
export async function until(condition: () => boolean, timeoutMs = 5000, what = 'condition'): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`${what} not met within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
