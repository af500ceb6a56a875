/**
 * Starts the real loopwatch binary on free loopback ports with a temporary config.
 * Binary: env LOOPWATCH_BIN, else <repo>/target/debug/loopwatch. Missing binary: the
 * caller gets `undefined` and decides (tests fail under CI, see `requireServer`).
 */

import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
/** The repository root (clients/typescript/dist-test/test/helpers → up 5). */
export const REPO_ROOT = resolve(here, '..', '..', '..', '..', '..');

/** Path of the loopwatch binary the tests use. */
export function loopwatchBin(): string {
  return process.env.LOOPWATCH_BIN ?? join(REPO_ROOT, 'target', 'debug', 'loopwatch');
}

/** A running loopwatch. */
export interface Server {
  /** The three ports, to start another loopwatch in its place. */
  ports: { grpc: number; http: number; admin: number };
  /** `127.0.0.1:port` of the OTLP gRPC listener (also Watch and Check). */
  grpcAddress: string;
  /** `http://127.0.0.1:port` of the admin API. */
  adminUrl: string;
  /** `http://127.0.0.1:port` of the OTLP/HTTP receiver. */
  otlpHttpUrl: string;
  /** Everything the process wrote to stderr/stdout so far. */
  log(): string;
  stop(): Promise<void>;
}

async function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolvePort(port));
    });
  });
}

/** Default profiles plus anything in `extraToml` (e.g. a require_approval profile). */
export async function startServer(
  extraToml = '',
  env: Record<string, string> = {},
  ports?: { grpc: number; http: number; admin: number },
): Promise<Server> {
  const bin = loopwatchBin();
  if (!existsSync(bin)) throw new Error(`loopwatch binary not found at ${bin} (set LOOPWATCH_BIN)`);
  const { grpc, http, admin } = ports ?? { grpc: await freePort(), http: await freePort(), admin: await freePort() };
  const dir = mkdtempSync(join(tmpdir(), 'loopwatch-ts-'));
  const config = join(dir, 'loopwatch.toml');
  writeFileSync(
    config,
    `[receiver]\ngrpc_listen = "127.0.0.1:${grpc}"\nhttp_listen = "127.0.0.1:${http}"\n` +
      `[admin]\nlisten = "127.0.0.1:${admin}"\n` +
      `[detection]\nfingerprint_key = "loopwatch-ts-tests"\n` +
      extraToml,
  );
  let output = '';
  const child: ChildProcess = spawn(bin, ['serve', '--config', config, '--log-level', 'warn'], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, LOOPWATCH_CONFIG: undefined, ...env },
  });
  child.stdout?.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (output += d.toString()));
  let exited = false;
  child.on('exit', () => (exited = true));
  const adminUrl = `http://127.0.0.1:${admin}`;
  const deadline = Date.now() + 15000;
  for (;;) {
    if (exited) throw new Error(`loopwatch exited at start-up:\n${output}`);
    try {
      const r = await fetch(`${adminUrl}/readyz`);
      if (r.ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`loopwatch not ready within 15 s:\n${output}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    ports: { grpc, http, admin },
    grpcAddress: `127.0.0.1:${grpc}`,
    adminUrl,
    otlpHttpUrl: `http://127.0.0.1:${http}`,
    log: () => output,
    stop: async () => {
      if (!exited) {
        const done = new Promise((r) => child.once('exit', r));
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
        await done;
        clearTimeout(timer);
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
