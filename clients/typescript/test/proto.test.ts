/** The .proto copies shipped in the package equal the repository's proto/ files. */

import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { REPO_ROOT } from './helpers/server.js';

const PACKAGE_ROOT = join(REPO_ROOT, 'clients', 'typescript');

test('proto/loopwatch/v1 copies are current (run `npm run copy-proto` after changing proto/)', () => {
  const source = join(REPO_ROOT, 'proto', 'loopwatch', 'v1');
  const copy = join(PACKAGE_ROOT, 'proto', 'loopwatch', 'v1');
  const names = readdirSync(source).filter((n) => n.endsWith('.proto')).sort();
  assert.deepEqual(names, ['guard.proto', 'signals.proto']);
  assert.deepEqual(readdirSync(copy).filter((n) => n.endsWith('.proto')).sort(), names);
  for (const name of names) {
    assert.equal(readFileSync(join(copy, name), 'utf8'), readFileSync(join(source, name), 'utf8'), `${name} differs`);
  }
});
