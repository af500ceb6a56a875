/**
 * gRPC transport: `loopwatch.v1.Signals/Watch` (server stream) and `loopwatch.v1.Guard/Check`
 * on loopwatch's OTLP gRPC port, with @grpc/grpc-js.
 */

import * as grpc from '@grpc/grpc-js';
import { LoopwatchTransportError } from '../errors.js';
import type { CheckRequest, CheckResult, Signal } from '../types.js';
import { isDecision, isSignalAction } from '../types.js';
import { services } from './proto.js';
import type { SignalHandlers, SignalTransport, Subscription, WatchFilter } from './transport.js';

/** Options of {@link GrpcTransport}. */
export interface GrpcTransportOptions {
  /** `host:port` of loopwatch's OTLP gRPC listener. */
  target: string;
  /** Admin token, sent as `authorization: Bearer <token>` metadata. */
  token?: string;
  /** Use TLS (system roots). Default false (loopback sidecar). */
  tls?: boolean;
  /** First reconnect delay of a broken Watch stream, ms (doubles up to 2000). Default 100. */
  reconnectDelayMs?: number;
}

type WatchClient = grpc.Client & {
  Watch(request: object, metadata: grpc.Metadata): grpc.ClientReadableStream<RawSignal>;
};
type GuardClient = grpc.Client & {
  Check(
    request: object,
    metadata: grpc.Metadata,
    options: grpc.CallOptions,
    callback: (error: grpc.ServiceError | null, response?: Record<string, unknown>) => void,
  ): grpc.ClientUnaryCall;
};
type RawSignal = Record<string, unknown>;

/** Watch and Check over one gRPC channel. */
export class GrpcTransport implements SignalTransport {
  readonly kind = 'grpc';
  private readonly signals: WatchClient;
  private readonly guard: GuardClient;
  private readonly token?: string;
  private readonly reconnectDelayMs: number;

  constructor(options: GrpcTransportOptions) {
    const { Signals, Guard } = services();
    const credentials = options.tls ? grpc.credentials.createSsl() : grpc.credentials.createInsecure();
    this.signals = new Signals(options.target, credentials) as unknown as WatchClient;
    // One channel for both services.
    this.guard = new Guard(options.target, credentials, {
      channelOverride: this.signals.getChannel(),
    }) as unknown as GuardClient;
    this.token = options.token;
    this.reconnectDelayMs = options.reconnectDelayMs ?? 100;
  }

  private metadata(): grpc.Metadata {
    const metadata = new grpc.Metadata();
    if (this.token) metadata.set('authorization', `Bearer ${this.token}`);
    return metadata;
  }

  /**
   * Opens `Watch` for `filter`. `ready` resolves once loopwatch has answered with headers,
   * i.e. the subscription is in place and every later signal of the run will be delivered;
   * it rejects when the first attempt fails (address unreachable, INVALID_ARGUMENT,
   * UNAUTHENTICATED). A stream broken later is reopened with backoff; `onReconnect` is
   * called after each reopening so the caller can catch up on signals it missed.
   */
  watch(filter: WatchFilter, handlers: SignalHandlers): Subscription {
    let closed = false;
    let call: grpc.ClientReadableStream<RawSignal> | undefined;
    let timer: NodeJS.Timeout | undefined;
    let delay = this.reconnectDelayMs;
    let everReady = false;
    let resolveReady!: () => void;
    let rejectReady!: (e: Error) => void;
    const ready = new Promise<void>((resolve, reject) => {
      resolveReady = resolve;
      rejectReady = reject;
    });
    ready.catch(() => undefined);

    const open = (): void => {
      if (closed) return;
      const request = { trace_id: filter.traceId ?? '', service_name: filter.serviceName ?? '', action: '' };
      const current = this.signals.Watch(request, this.metadata());
      call = current;
      let done = false;
      // A stream that failed or that loopwatch ended (restart, shutdown) is reported and
      // reopened once, with backoff; INVALID_ARGUMENT and UNAUTHENTICATED are not retried.
      const reopen = (error: LoopwatchTransportError, retry: boolean): void => {
        if (done || closed) return;
        done = true;
        handlers.onError?.(error);
        if (!retry) return;
        timer = setTimeout(open, delay);
        timer.unref();
        delay = Math.min(delay * 2, 2000);
      };
      current.on('metadata', () => {
        delay = this.reconnectDelayMs;
        if (!everReady) {
          everReady = true;
          resolveReady();
        } else {
          handlers.onReconnect?.();
        }
      });
      current.on('data', (raw: RawSignal) => {
        const signal = signalFromProto(raw);
        if (signal) handlers.onSignal(signal);
      });
      current.on('error', (error: grpc.ServiceError) => {
        if (closed || error.code === grpc.status.CANCELLED) return;
        const wrapped = new LoopwatchTransportError(`loopwatch Watch: ${error.details || error.message}`, error.code, {
          cause: error,
        });
        if (!everReady) {
          closed = true;
          done = true;
          rejectReady(wrapped);
          return;
        }
        const fatal = error.code === grpc.status.INVALID_ARGUMENT || error.code === grpc.status.UNAUTHENTICATED;
        reopen(wrapped, !fatal);
      });
      current.on('end', () => {
        if (!everReady) {
          if (done || closed) return;
          done = true;
          closed = true;
          rejectReady(new LoopwatchTransportError('loopwatch Watch: stream ended before it was set up'));
          return;
        }
        reopen(new LoopwatchTransportError('loopwatch Watch: stream ended by loopwatch; reopening'), true);
      });
    };
    open();
    return {
      ready,
      close: () => {
        closed = true;
        if (timer) clearTimeout(timer);
        call?.cancel();
      },
    };
  }

  /**
   * `Guard/Check`. Arguments that are not a string are sent as their JSON text.
   * @throws LoopwatchTransportError on any gRPC error or when `timeoutMs` passes.
   */
  check(request: CheckRequest, timeoutMs: number): Promise<CheckResult> {
    const body = {
      trace_id: request.trace_id ?? '',
      run_key: request.run_key ?? '',
      tool_name: request.tool_name,
      arguments:
        request.arguments === undefined
          ? ''
          : typeof request.arguments === 'string'
            ? request.arguments
            : JSON.stringify(request.arguments),
    };
    return new Promise((resolve, reject) => {
      this.guard.Check(body, this.metadata(), { deadline: Date.now() + timeoutMs }, (error, response) => {
        if (error) {
          reject(
            new LoopwatchTransportError(`loopwatch Check: ${error.details || error.message}`, error.code, {
              cause: error,
            }),
          );
          return;
        }
        const result = checkFromWire(response ?? {});
        if (result) resolve(result);
        else reject(new LoopwatchTransportError(`loopwatch Check: unexpected answer ${JSON.stringify(response)}`));
      });
    });
  }

  /** Closes the channel; open Watch calls end. */
  close(): void {
    this.signals.close();
  }
}

/** A `CheckResult` from a wire object (gRPC or JSON), or undefined when it is not one. */
export function checkFromWire(raw: Record<string, unknown>): CheckResult | undefined {
  if (!isDecision(raw.decision)) return undefined;
  return {
    decision: raw.decision,
    pattern: String(raw.pattern ?? ''),
    count: Number(raw.count ?? 0),
    message: String(raw.message ?? ''),
    profile: String(raw.profile ?? ''),
    known_run: Boolean(raw.known_run),
  };
}

/** A `Signal` from a proto-loader object (snake_case keys, 64-bit ints as strings). */
export function signalFromProto(raw: RawSignal): Signal | undefined {
  if (!isSignalAction(raw.action)) return undefined;
  const strings = (v: unknown): string[] => (Array.isArray(v) ? v.map(String) : []);
  const optional = (v: unknown): string | null => (typeof v === 'string' ? v : null);
  return {
    schema: String(raw.schema ?? ''),
    id: String(raw.id ?? ''),
    occurrence: Number(raw.occurrence ?? 0),
    severity: String(raw.severity ?? ''),
    time_unix_nano: String(raw.time_unix_nano ?? '0'),
    trace_id: String(raw.trace_id ?? ''),
    run_key: String(raw.run_key ?? ''),
    service_name: optional(raw.service_name),
    agent_name: optional(raw.agent_name),
    profile: String(raw.profile ?? ''),
    action: raw.action,
    pattern: String(raw.pattern ?? ''),
    tool_names: strings(raw.tool_names),
    count: Number(raw.count ?? 0),
    window: Number(raw.window ?? 0),
    fingerprints: strings(raw.fingerprints),
    span_ids: strings(raw.span_ids),
    first_span_id: String(raw.first_span_id ?? ''),
    message: String(raw.message ?? ''),
  };
}
