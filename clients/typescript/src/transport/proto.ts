/**
 * Loads `loopwatch.v1` (Signals, Guard) from the .proto copies shipped in this package's
 * `proto/` folder (copied from the repository's `proto/` by `scripts/copy-proto.mjs`).
 */

import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';

/** Folder holding `loopwatch/v1/*.proto`. */
export const PROTO_ROOT = fileURLToPath(new URL('../../proto/', import.meta.url));

/** The proto files the client loads, relative to {@link PROTO_ROOT}. */
export const PROTO_FILES = ['loopwatch/v1/signals.proto', 'loopwatch/v1/guard.proto'];

/** Constructors of the generated service clients. */
export interface LoopwatchServices {
  Signals: grpc.ServiceClientConstructor;
  Guard: grpc.ServiceClientConstructor;
}

let cached: LoopwatchServices | undefined;

/**
 * The `loopwatch.v1` service clients. Field names stay snake_case (`keepCase`), 64-bit
 * integers are decimal strings, absent optional fields are left out.
 */
export function services(): LoopwatchServices {
  if (cached) return cached;
  const definition = protoLoader.loadSync(
    PROTO_FILES.map((f) => join(PROTO_ROOT, f)),
    { keepCase: true, longs: String, enums: String, defaults: true, oneofs: true, includeDirs: [PROTO_ROOT] },
  );
  const root = grpc.loadPackageDefinition(definition) as unknown as {
    loopwatch: { v1: { Signals: grpc.ServiceClientConstructor; Guard: grpc.ServiceClientConstructor } };
  };
  cached = { Signals: root.loopwatch.v1.Signals, Guard: root.loopwatch.v1.Guard };
  return cached;
}
