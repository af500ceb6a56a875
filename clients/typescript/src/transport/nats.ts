/**
 * NATS transport: a core subscription to loopwatch's NATS sink (`[signals.nats]`, subjects
 * `<subject_prefix>.<action>.<service>`), with `@nats-io/transport-node` (nats.js v3), an
 * optional peer dependency loaded only when this transport is used. The pre-execution
 * check goes to loopwatch over gRPC or HTTP (`checker`).
 */

import type { CheckRequest, CheckResult } from '../types.js';
import {
  delegateCheck,
  importPackage,
  requirePackage,
  type SinkTransportOptions,
  sinkSubscription,
  track,
  withDeadline,
} from './pubsub.js';
import type { SignalHandlers, SignalTransport, Subscription, WatchFilter } from './transport.js';

/** Default NATS URL when neither the option nor env `LOOPWATCH_SIGNALS__NATS__URL` is set. */
export const DEFAULT_NATS_URL = 'nats://127.0.0.1:4222';
/** loopwatch's default `signals.nats.subject_prefix`. */
export const DEFAULT_NATS_SUBJECT_PREFIX = 'loopwatch.signals';

/** Options of {@link NatsTransport}. */
export interface NatsTransportOptions extends SinkTransportOptions {
  /**
   * NATS URL (`nats://[user:password@]host:port`; `tls://` to require TLS): the server
   * loopwatch's `[signals.nats] url` publishes to. Default env `LOOPWATCH_SIGNALS__NATS__URL`
   * (loopwatch's own variable), else `nats://127.0.0.1:4222`.
   */
  url?: string;
  /** loopwatch's `signals.nats.subject_prefix`. Default `loopwatch.signals`. */
  subjectPrefix?: string;
}

/**
 * Signals from loopwatch's NATS subjects; `check` by the `checker` given.
 *
 * Each `watch` opens its own connection and subscribes to `<subjectPrefix>.>` (a core
 * subscription: it also receives what loopwatch publishes through JetStream while it is
 * connected, not what it missed). Messages are parsed as `loopwatch.signal.v1` records; the
 * {@link WatchFilter} is applied here.
 */
export class NatsTransport implements SignalTransport {
  readonly kind = 'nats';
  /** The NATS URL used. */
  readonly url: string;
  /** The subject subscribed to: `<subjectPrefix>.>`. */
  readonly subject: string;
  private readonly options: NatsTransportOptions;
  private readonly subscriptions = new Set<Subscription>();

  /**
   * @throws Error (`code` `LOOPWATCH_MISSING_PACKAGE`) naming the package when
   *   `@nats-io/transport-node` is not installed.
   */
  constructor(options: NatsTransportOptions = {}) {
    requirePackage('@nats-io/transport-node', 'nats');
    this.options = options;
    this.url = options.url ?? (process.env.LOOPWATCH_SIGNALS__NATS__URL || DEFAULT_NATS_URL);
    this.subject = `${options.subjectPrefix ?? DEFAULT_NATS_SUBJECT_PREFIX}.>`;
  }

  /**
   * Subscribes on a new connection. `ready` resolves after the SUB has been flushed (a
   * PING answered after it: the server has registered the subscription); it rejects with a
   * `LoopwatchTransportError` when NATS cannot be reached or does not answer within
   * `connectTimeoutMs`. A connection lost later is reported to `onError` and re-made with
   * backoff, then `onReconnect` is called. A message that is not a signal is ignored and
   * reported to `onError`.
   */
  watch(filter: WatchFilter, handlers: SignalHandlers): Subscription {
    const timeoutMs = this.options.connectTimeoutMs ?? 5000;
    const subscription = sinkSubscription(
      'NATS',
      async (deliver) => {
        const { connect } = await importPackage('@nats-io/transport-node', 'nats', () => import('@nats-io/transport-node'));
        // Reconnection is ours (with backoff and onReconnect), not the library's.
        const nc = await connect({ servers: this.url, timeout: timeoutMs, reconnect: false, name: 'loopwatch-signals' });
        const close = (): void => {
          nc.close().catch(() => undefined);
        };
        let resolveLost!: (e: Error) => void;
        const lost = new Promise<Error>((resolve) => (resolveLost = resolve));
        void nc.closed().then((error) => resolveLost(error ?? new Error(`connection to ${this.url} closed`)));
        try {
          nc.subscribe(this.subject, {
            // An error here (e.g. a permissions violation) ends the subscription: reconnect.
            callback: (error, msg) => (error ? resolveLost(error) : deliver(msg.data)),
          });
          await withDeadline(nc.flush(), timeoutMs, `loopwatch NATS: no answer to the SUB from ${this.url} within ${timeoutMs} ms`);
        } catch (error) {
          close();
          throw error;
        }
        return { lost, close };
      },
      filter,
      handlers,
      this.options,
    );
    return track(this.subscriptions, subscription);
  }

  /**
   * The pre-execution check, made by the `checker` (NATS cannot answer it).
   * @throws LoopwatchTransportError on failure, or when no `checker` was given.
   */
  check(request: CheckRequest, timeoutMs: number): Promise<CheckResult> {
    return delegateCheck('nats', this.options.checker, request, timeoutMs);
  }

  /** Ends every subscription of this transport and closes the `checker`. */
  close(): void {
    for (const subscription of [...this.subscriptions]) subscription.close();
    this.options.checker?.close?.();
  }
}
