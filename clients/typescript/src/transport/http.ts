/**
 * HTTP transport: polls `GET /v1/signals?trace_id=…&since=…` on the admin API and checks
 * with `POST /v1/check`. For deployments where the OTLP gRPC port is not reachable from
 * the agent; the gRPC stream is faster (no poll interval) and misses nothing.
 */

import type { CheckRequest, CheckResult } from '../types.js';
import type { AdminClient } from './admin.js';
import type { SignalHandlers, SignalTransport, Subscription, WatchFilter } from './transport.js';

/** Options of {@link HttpTransport}. */
export interface HttpTransportOptions {
  /** Time between two polls, ms. Default 100. */
  pollIntervalMs?: number;
  /**
   * Margin subtracted from the newest `time_unix_nano` seen to form the next `since`, ms:
   * spans arrive late and clocks differ. Default 5000.
   */
  lateMarginMs?: number;
}

/** Signals by polling, check by `POST /v1/check`. */
export class HttpTransport implements SignalTransport {
  readonly kind = 'http';
  private readonly pollIntervalMs: number;
  private readonly lateMarginNs: bigint;

  constructor(
    private readonly admin: AdminClient,
    options: HttpTransportOptions = {},
  ) {
    this.pollIntervalMs = options.pollIntervalMs ?? 100;
    this.lateMarginNs = BigInt(options.lateMarginMs ?? 5000) * 1_000_000n;
  }

  /**
   * Polls for the filter's signals. The first poll asks for every signal of the trace
   * loopwatch still holds; later ones from the newest seen minus the margin. Signals are
   * de-duplicated on `id` here. `ready` resolves after the first successful poll and
   * rejects when it fails.
   */
  watch(filter: WatchFilter, handlers: SignalHandlers): Subscription {
    let closed = false;
    let since: bigint | undefined;
    let failing = false;
    const seen = new Set<string>();
    let timer: NodeJS.Timeout | undefined;

    const poll = async (): Promise<void> => {
      const signals = await this.admin.signals({
        traceId: filter.traceId,
        since: since === undefined ? undefined : String(since > 0n ? since : 0n),
      });
      for (const signal of signals) {
        if (closed) return;
        if (filter.serviceName && signal.service_name !== filter.serviceName) continue;
        const t = BigInt(signal.time_unix_nano) - this.lateMarginNs;
        if (since === undefined || t > since) since = t;
        if (seen.has(signal.id)) continue;
        seen.add(signal.id);
        handlers.onSignal(signal);
      }
      if (since === undefined) since = 0n;
    };
    const loop = (): void => {
      if (closed) return;
      timer = setTimeout(() => {
        poll()
          .then(() => {
            if (failing) handlers.onReconnect?.();
            failing = false;
          })
          .catch((error: Error) => {
            if (!closed && !failing) handlers.onError?.(error);
            failing = true;
          })
          .finally(loop);
      }, this.pollIntervalMs);
      timer.unref();
    };
    const ready = poll().then(loop);
    ready.catch(() => undefined);
    return {
      ready,
      close: () => {
        closed = true;
        if (timer) clearTimeout(timer);
      },
    };
  }

  check(request: CheckRequest, timeoutMs: number): Promise<CheckResult> {
    return this.admin.check(request, timeoutMs);
  }

  close(): void {
    // fetch keeps no connection state of ours.
  }
}
