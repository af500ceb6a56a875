/**
 * Redis transport: subscribes to loopwatch's Redis sink (`[signals.redis]`, which does
 * `PUBLISH <channel> <signal JSON>`), with the `redis` package (node-redis), an optional
 * peer dependency loaded only when this transport is used. The pre-execution check goes
 * to loopwatch over gRPC or HTTP (`checker`).
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

/** Default Redis URL when neither the option nor env `LOOPWATCH_SIGNALS__REDIS__URL` is set. */
export const DEFAULT_REDIS_URL = 'redis://127.0.0.1:6379';
/** loopwatch's default `signals.redis.channel`. */
export const DEFAULT_REDIS_CHANNEL = 'loopwatch:signals';

/** Options of {@link RedisTransport}. */
export interface RedisTransportOptions extends SinkTransportOptions {
  /**
   * Redis URL (`redis://[user:password@]host:port[/db]`, `rediss://` for TLS): the one
   * loopwatch's `[signals.redis] url` publishes to. Default env
   * `LOOPWATCH_SIGNALS__REDIS__URL` (loopwatch's own variable), else `redis://127.0.0.1:6379`.
   */
  url?: string;
  /** loopwatch's `signals.redis.channel`. Default `loopwatch:signals`. */
  channel?: string;
}

/**
 * Signals from loopwatch's Redis channel; `check` by the `checker` given.
 *
 * Each `watch` opens its own connection (Redis puts a subscribing connection in subscriber
 * mode). Messages are parsed as `loopwatch.signal.v1` records; the {@link WatchFilter} is
 * applied here, since the channel carries every signal of every run.
 */
export class RedisTransport implements SignalTransport {
  readonly kind = 'redis';
  /** The Redis URL used. */
  readonly url: string;
  /** The channel subscribed to. */
  readonly channel: string;
  private readonly options: RedisTransportOptions;
  private readonly subscriptions = new Set<Subscription>();

  /**
   * @throws Error (`code` `LOOPWATCH_MISSING_PACKAGE`) naming the package when `redis` is
   *   not installed.
   */
  constructor(options: RedisTransportOptions = {}) {
    requirePackage('redis', 'redis');
    this.options = options;
    this.url = options.url ?? (process.env.LOOPWATCH_SIGNALS__REDIS__URL || DEFAULT_REDIS_URL);
    this.channel = options.channel ?? DEFAULT_REDIS_CHANNEL;
  }

  /**
   * `SUBSCRIBE <channel>` on a new connection. `ready` resolves once Redis has answered the
   * SUBSCRIBE (every signal published afterwards is delivered); it rejects with a
   * `LoopwatchTransportError` when Redis cannot be reached or does not answer within
   * `connectTimeoutMs`. A connection lost later is reported to `onError` and re-made with
   * backoff, then `onReconnect` is called (what was published meanwhile is not replayed).
   * A message that is not a signal is ignored and reported to `onError`.
   */
  watch(filter: WatchFilter, handlers: SignalHandlers): Subscription {
    const timeoutMs = this.options.connectTimeoutMs ?? 5000;
    const subscription = sinkSubscription(
      'Redis',
      async (deliver) => {
        const { createClient } = await importPackage('redis', 'redis', () => import('redis'));
        const client = createClient({
          url: this.url,
          name: 'loopwatch-signals',
          socket: { connectTimeout: timeoutMs, reconnectStrategy: false },
        });
        let resolveLost!: (e: Error) => void;
        const lost = new Promise<Error>((resolve) => (resolveLost = resolve));
        client.on('error', (error: Error) => resolveLost(error));
        client.on('end', () => resolveLost(new Error(`connection to ${this.url} closed`)));
        const close = (): void => {
          try {
            client.destroy();
          } catch {
            // already closed
          }
        };
        try {
          await withDeadline(
            (async () => {
              await client.connect();
              // Resolves on Redis's reply to SUBSCRIBE: the subscription is in force.
              await client.subscribe(this.channel, (message: string) => deliver(message));
            })(),
            timeoutMs,
            `loopwatch Redis: no SUBSCRIBE answer from ${this.url} within ${timeoutMs} ms`,
          );
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
   * The pre-execution check, made by the `checker` (Redis cannot answer it).
   * @throws LoopwatchTransportError on failure, or when no `checker` was given.
   */
  check(request: CheckRequest, timeoutMs: number): Promise<CheckResult> {
    return delegateCheck('redis', this.options.checker, request, timeoutMs);
  }

  /** Ends every subscription of this transport and closes the `checker`. */
  close(): void {
    for (const subscription of [...this.subscriptions]) subscription.close();
    this.options.checker?.close?.();
  }
}
