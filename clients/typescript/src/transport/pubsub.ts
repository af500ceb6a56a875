/**
 * What the two sink transports (Redis, NATS) share: loading their optional client package,
 * the subscription with backoff and reconnect, the client-side filter, and handing the
 * pre-execution check (which a sink cannot answer) to a gRPC or HTTP transport.
 */

import { LoopwatchTransportError } from '../errors.js';
import type { CheckRequest, CheckResult } from '../types.js';
import { signalFromJson } from './signal-json.js';
import type { SignalHandlers, Subscription, WatchFilter } from './transport.js';

/**
 * What makes the pre-execution check for a sink transport: any {@link SignalTransport}
 * (usually a `GrpcTransport` or `HttpTransport` to the run's loopwatch), or an object with
 * the same `check`. Its `close()`, when it has one, is called by the sink transport's.
 */
export interface CheckTransport {
  check(request: CheckRequest, timeoutMs: number): Promise<CheckResult>;
  close?(): void;
}

/** Options both sink transports take. */
export interface SinkTransportOptions {
  /**
   * Makes `check()`: a sink only carries signals. Without it `check()` rejects with a
   * `LoopwatchTransportError` (a guard made with `transport: 'redis' | 'nats'` passes a
   * gRPC or HTTP transport here, see `GuardOptions.checkTransport`).
   */
  checker?: CheckTransport;
  /** Deadline of connecting and of the server's confirmation of the subscription, ms. Default 5000. */
  connectTimeoutMs?: number;
  /** First delay before reconnecting after the connection broke, ms (doubles up to the maximum). Default 100. */
  reconnectDelayMs?: number;
  /** Longest delay between two reconnection attempts, ms. Default 5000. */
  maxReconnectDelayMs?: number;
}

/** One connection of a sink transport, subscribed (the server confirmed it). */
export interface SinkSession {
  /** Resolves (never rejects) with the reason when the connection ends by itself. */
  lost: Promise<Error>;
  /** Closes the connection; `lost` may then never resolve. */
  close(): void;
}

/**
 * Connects and subscribes; calls `deliver(payload)` for each message (from the moment it is
 * subscribed) and resolves once the server confirmed the subscription. Rejects when it
 * cannot connect or subscribe within the deadline.
 */
export type SinkConnect = (deliver: (payload: string | Uint8Array) => void) => Promise<SinkSession>;

/** `promise`, or a rejection with `message` after `ms`. */
export function withDeadline<T>(promise: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new LoopwatchTransportError(message)), ms);
    timer.unref();
  });
  return Promise.race([promise, deadline]).finally(() => clearTimeout(timer));
}

/**
 * Throws an `Error` (`code` {@link MISSING_PACKAGE}) naming the npm package to install when
 * `pkg` cannot be resolved from this module (where the later `import()` looks for it).
 * Synchronous, so a transport's constructor fails at once, as the Python client's does.
 */
export function requirePackage(pkg: string, transport: string): void {
  try {
    import.meta.resolve(pkg);
  } catch (error) {
    throw missingPackage(pkg, transport, error);
  }
}

/** Imports an optional peer dependency; a missing one becomes the `Error` of {@link requirePackage}. */
export async function importPackage<T>(pkg: string, transport: string, load: () => Promise<T>): Promise<T> {
  try {
    return await load();
  } catch (error) {
    const code = (error as { code?: string }).code;
    if (code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND') throw missingPackage(pkg, transport, error);
    throw error;
  }
}

/** `code` of the `Error` thrown when a transport's optional package is not installed. */
export const MISSING_PACKAGE = 'LOOPWATCH_MISSING_PACKAGE';

function missingPackage(pkg: string, transport: string, cause: unknown): Error {
  const error = new Error(`the ${transport} signal transport needs the optional package \`${pkg}\`: npm install ${pkg}`, {
    cause,
  });
  return Object.assign(error, { code: MISSING_PACKAGE });
}

/** Whether `signal` passes `filter` (trace id compared case-insensitively). */
function matches(filter: WatchFilter, traceId: string, serviceName: string | null): boolean {
  if (filter.traceId && traceId !== filter.traceId.toLowerCase()) return false;
  if (filter.serviceName && serviceName !== filter.serviceName) return false;
  return true;
}

/**
 * A subscription over a sink: `connect` once; `ready` resolves when the first connection is
 * subscribed, rejects (closing the subscription) when it fails. Later, a lost connection
 * is reported to `onError` and reconnected with backoff (`reconnectDelayMs` doubling to
 * `maxReconnectDelayMs`), each failed attempt reported too; after each reconnection
 * `onReconnect` is called (signals may have been missed). Each message is parsed as a
 * signal: one that is not a signal is ignored and reported to `onError` (or, without one,
 * as a process warning); signals failing `filter` are dropped; `onSignal` gets the rest.
 */
export function sinkSubscription(
  name: string,
  connect: SinkConnect,
  filter: WatchFilter,
  handlers: SignalHandlers,
  options: SinkTransportOptions,
): Subscription {
  const initialDelay = options.reconnectDelayMs ?? 100;
  const maxDelay = options.maxReconnectDelayMs ?? 5000;
  let delay = initialDelay;
  let closed = false;
  let everReady = false;
  let session: SinkSession | undefined;
  let timer: NodeJS.Timeout | undefined;
  let resolveReady!: () => void;
  let rejectReady!: (e: Error) => void;
  const ready = new Promise<void>((resolve, reject) => {
    resolveReady = resolve;
    rejectReady = reject;
  });
  ready.catch(() => undefined);

  const report = (error: Error): void => {
    if (closed) return;
    if (handlers.onError) {
      try {
        handlers.onError(error);
      } catch {
        // a throwing handler must not break the subscription
      }
    } else {
      process.emitWarning(error.message, { code: 'LOOPWATCH_SIGNAL_TRANSPORT' });
    }
  };

  const deliver = (payload: string | Uint8Array): void => {
    if (closed) return;
    let signal;
    try {
      signal = signalFromJson(payload);
    } catch (error) {
      report(new LoopwatchTransportError(`loopwatch ${name}: ignoring a message that is not a signal: ${(error as Error).message}`));
      return;
    }
    if (!matches(filter, signal.trace_id, signal.service_name)) return;
    try {
      handlers.onSignal(signal);
    } catch (error) {
      report(error as Error);
    }
  };

  const wrap = (error: unknown): LoopwatchTransportError =>
    error instanceof LoopwatchTransportError
      ? error
      : new LoopwatchTransportError(`loopwatch ${name}: ${(error as Error)?.message ?? String(error)}`, undefined, {
          cause: error,
        });

  const retry = (): void => {
    if (closed) return;
    timer = setTimeout(attempt, delay);
    timer.unref();
    delay = Math.min(delay * 2, maxDelay);
  };

  const attempt = (): void => {
    if (closed) return;
    connect(deliver).then(
      (current) => {
        if (closed) {
          current.close();
          return;
        }
        session = current;
        delay = initialDelay;
        if (!everReady) {
          everReady = true;
          resolveReady();
        } else {
          handlers.onReconnect?.();
        }
        void current.lost.then((reason) => {
          if (closed || session !== current) return;
          session = undefined;
          current.close();
          report(wrap(reason));
          retry();
        });
      },
      (error: unknown) => {
        if (closed) return;
        if (!everReady) {
          closed = true;
          // A missing package is not a transport failure: pass it on as it is.
          rejectReady((error as { code?: string })?.code === MISSING_PACKAGE ? (error as Error) : wrap(error));
          return;
        }
        report(wrap(error));
        retry();
      },
    );
  };
  attempt();

  return {
    ready,
    close: () => {
      closed = true;
      if (timer) clearTimeout(timer);
      session?.close();
      session = undefined;
    },
  };
}

/** `checker.check`, or a rejection saying the transport has no checker. */
export function delegateCheck(
  name: string,
  checker: CheckTransport | undefined,
  request: CheckRequest,
  timeoutMs: number,
): Promise<CheckResult> {
  if (!checker) {
    return Promise.reject(
      new LoopwatchTransportError(
        `the ${name} signal transport cannot make the pre-execution check: give it a \`checker\` (a gRPC or HTTP transport)`,
      ),
    );
  }
  return checker.check(request, timeoutMs);
}

/** Adds `subscription` to `set` until it is closed (so the transport's `close()` can end it). */
export function track(set: Set<Subscription>, subscription: Subscription): Subscription {
  set.add(subscription);
  subscription.ready.catch(() => set.delete(subscription));
  return {
    ready: subscription.ready,
    close: () => {
      set.delete(subscription);
      subscription.close();
    },
  };
}
