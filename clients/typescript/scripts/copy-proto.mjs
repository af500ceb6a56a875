// Copies the repository's proto/loopwatch/v1/*.proto into this package's proto/ folder,
// which the gRPC transport loads at run time (@grpc/proto-loader). Run by `npm run build`;
// test/proto.test.ts fails when the copies differ from the repository's files.
import { copyFileSync, mkdirSync, readdirSync, existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const source = join(here, '..', '..', '..', 'proto', 'loopwatch', 'v1');
const target = join(here, '..', 'proto', 'loopwatch', 'v1');

if (!existsSync(source)) {
  // Installed from a packed tarball: the copies shipped in proto/ are used as they are.
  console.log(`copy-proto: ${source} not found; keeping the packaged copies`);
  process.exit(0);
}
mkdirSync(target, { recursive: true });
for (const name of readdirSync(source).filter((n) => n.endsWith('.proto')).sort()) {
  copyFileSync(join(source, name), join(target, name));
  console.log(`copy-proto: proto/loopwatch/v1/${name}`);
}
