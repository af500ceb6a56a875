/**
 * Runs every examples/typescript-<framework>/agent.mjs against the real loopwatch server,
 * without and with --check. The examples resolve their packages through a node_modules
 * link to this package's (the one `npm ci` installed), and `@loopwatch/client` through a
 * link to this package, so they run the built client as a user's install would.
 */

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, lstatSync, mkdirSync, readdirSync, symlinkSync } from 'node:fs';
import { join, relative } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import { requireServerBinary, serverBinaryExists } from './helpers/env.js';
import { KILL_THRESHOLD } from './helpers/loop.js';
import { REPO_ROOT, startServer, type Server } from './helpers/server.js';

const run = promisify(execFile);
const PACKAGE = join(REPO_ROOT, 'clients', 'typescript');
const EXAMPLES = join(REPO_ROOT, 'examples');
const names = readdirSync(EXAMPLES).filter((n) => n.startsWith('typescript-')).sort();

function link(target: string, path: string): void {
  if (existsSync(path) || (() => { try { return lstatSync(path).isSymbolicLink(); } catch { return false; } })()) return;
  symlinkSync(relative(join(path, '..'), target), path, 'dir');
}

describe('examples', () => {
  let server: Server | undefined;

  before(async () => {
    mkdirSync(join(PACKAGE, 'node_modules', '@loopwatch'), { recursive: true });
    link(PACKAGE, join(PACKAGE, 'node_modules', '@loopwatch', 'client'));
    for (const name of names) link(join(PACKAGE, 'node_modules'), join(EXAMPLES, name, 'node_modules'));
    if (serverBinaryExists()) server = await startServer();
  });
  after(async () => {
    await server?.stop();
  });

  test('there is one example per integration', () => {
    assert.deepEqual(names, ['typescript-ai-sdk', 'typescript-langchain', 'typescript-openai-agents']);
  });

  for (const name of names) {
    for (const check of [false, true]) {
      test(`${name}${check ? ' --check' : ''}: the looping agent is stopped`, async (t) => {
        if (!requireServerBinary(t)) return;
        const { stdout } = await run(process.execPath, ['agent.mjs', ...(check ? ['--check'] : [])], {
          cwd: join(EXAMPLES, name),
          env: { ...process.env, LOOPWATCH_GRPC_ADDRESS: server!.grpcAddress, LOOPWATCH_ADMIN_URL: server!.adminUrl },
          timeout: 60000,
        });
        const result = JSON.parse(stdout.trim().split('\n').pop()!) as {
          trace_id: string;
          tool_calls: number;
          stopped: boolean;
          reason: string;
          pattern: string;
        };
        assert.match(result.trace_id, /^[0-9a-f]{32}$/);
        assert.equal(result.stopped, true);
        assert.equal(result.pattern, 'repeated_result');
        if (check) {
          assert.equal(result.reason, 'deny');
          assert.equal(result.tool_calls, KILL_THRESHOLD - 1);
        } else {
          assert.equal(result.reason, 'kill');
          assert.ok(result.tool_calls >= KILL_THRESHOLD && result.tool_calls <= KILL_THRESHOLD + 2, `${result.tool_calls} calls`);
        }
        // loopwatch saw exactly the calls the example made, under the example's trace id.
        const loops = await fetch(`${server!.adminUrl}/v1/traces/${result.trace_id}/loops`);
        assert.equal(loops.status, 200);
        const body = (await loops.json()) as { data: Array<{ tool_name: string; hits: number }> };
        assert.equal(body.data[0]?.tool_name, 'fetch_url');
        assert.equal(body.data[0]?.hits, result.tool_calls);
      });
    }
  }
});
