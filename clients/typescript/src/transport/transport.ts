/** What a guard needs from a transport: a signal subscription and the pre-execution check. */

import type { CheckRequest, CheckResult, Signal } from '../types.js';

/** Which signals to receive; an absent field matches any value. */
export interface WatchFilter {
  /** Exact trace id, 32 lowercase hex chars. */
  traceId?: string;
  /** Exact `service.name`. */
  serviceName?: string;
}

/** Callbacks of a subscription. */
export interface SignalHandlers {
  /** Each matching signal; may be called more than once for one id (de-duplicate on `id`). */
  onSignal(signal: Signal): void;
  /** A failure after the subscription was ready; the transport keeps trying. */
  onError?(error: Error): void;
  /** The subscription was re-established after a failure: signals may have been missed. */
  onReconnect?(): void;
}

/** A live subscription. */
export interface Subscription {
  /**
   * Resolves once every signal published from now on will be delivered; rejects when the
   * subscription cannot be made at all (loopwatch unreachable, bad filter, bad token).
   */
  ready: Promise<void>;
  /** Ends the subscription; no handler is called afterwards. */
  close(): void;
}

/** A way to reach loopwatch's signals and check. */
export interface SignalTransport {
  /** `grpc`, `http`, `redis`, `nats`, or an own transport's name. */
  readonly kind: string;
  watch(filter: WatchFilter, handlers: SignalHandlers): Subscription;
  /** The pre-execution check; rejects with `LoopwatchTransportError` on failure or timeout. */
  check(request: CheckRequest, timeoutMs: number): Promise<CheckResult>;
  /** Releases connections. */
  close(): void;
}
