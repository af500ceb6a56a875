/**
 * Where loopwatch is: addresses and token, from options or the environment.
 *
 * | option        | environment                                   | default                  |
 * |---------------|-----------------------------------------------|--------------------------|
 * | `grpcAddress` | `LOOPWATCH_GRPC_ADDRESS`                      | `127.0.0.1:4317`         |
 * | `adminUrl`    | `LOOPWATCH_ADMIN_URL`                         | `http://127.0.0.1:8787`  |
 * | `token`       | `LOOPWATCH_TOKEN`                             | none                     |
 */

/** Addresses of one loopwatch. */
export interface ConnectionOptions {
  /**
   * loopwatch's OTLP gRPC port, which also serves `Signals/Watch` and `Guard/Check`:
   * `host:port` or `http://host:port`.
   */
  grpcAddress?: string;
  /** loopwatch's admin API base URL (`/v1/signals`, `/v1/check`, approvals). */
  adminUrl?: string;
  /** `admin.auth_token`, sent as `authorization: Bearer <token>` on admin calls and gRPC. */
  token?: string;
}

/** Resolved addresses. */
export interface Connection {
  /** `host:port` for @grpc/grpc-js. */
  grpcTarget: string;
  /** Admin base URL without a trailing slash. */
  adminUrl: string;
  token?: string;
}

/**
 * Resolves `options` against the environment.
 * @throws TypeError when an address is not `host:port` / an http(s) URL.
 */
export function resolveConnection(options: ConnectionOptions = {}, env: NodeJS.ProcessEnv = process.env): Connection {
  const grpc = options.grpcAddress ?? env.LOOPWATCH_GRPC_ADDRESS ?? '127.0.0.1:4317';
  const admin = options.adminUrl ?? env.LOOPWATCH_ADMIN_URL ?? 'http://127.0.0.1:8787';
  const token = options.token ?? (env.LOOPWATCH_TOKEN || undefined);
  return { grpcTarget: grpcTarget(grpc), adminUrl: adminBase(admin), token };
}

/** `http://h:p`, `https://h:p` or `h:p` → `h:p`. */
export function grpcTarget(address: string): string {
  const stripped = address.replace(/^https?:\/\//, '').replace(/\/+$/, '');
  if (!/^(\[[0-9a-fA-F:.]+\]|[^\s/:]+):\d+$/.test(stripped)) {
    throw new TypeError(`loopwatch gRPC address must be host:port, got ${JSON.stringify(address)}`);
  }
  return stripped;
}

function adminBase(url: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new TypeError(`loopwatch admin URL must be an http(s) URL, got ${JSON.stringify(url)}`);
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
    throw new TypeError(`loopwatch admin URL must be an http(s) URL, got ${JSON.stringify(url)}`);
  }
  return parsed.toString().replace(/\/+$/, '');
}
