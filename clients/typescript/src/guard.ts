/**
 * The guard of one agent run: receives loopwatch's signals for the run's trace and turns
 * them into what the agent runtime acts on — an aborted `AbortSignal` and a
 * `LoopDetectedError` at the next step (`kill`), nudge messages for the model (`warn`),
 * an approval callback (`require_approval`) — and, opt-in, asks loopwatch before each
 * tool call (`check`) so a looping call can be blocked before it runs.
 */

import { trace, type Attributes, type Span } from '@opentelemetry/api';
import { type Connection, type ConnectionOptions, resolveConnection } from './config.js';
import { LoopDetectedError } from './errors.js';
import { AdminClient } from './transport/admin.js';
import { GrpcTransport } from './transport/grpc.js';
import { HttpTransport } from './transport/http.js';
import { NatsTransport, type NatsTransportOptions } from './transport/nats.js';
import { RedisTransport, type RedisTransportOptions } from './transport/redis.js';
import type { SignalTransport, Subscription } from './transport/transport.js';
import type { ApprovalAnswer, CheckResult, Signal } from './types.js';

/**
 * Name of the span event recording each answer to a `require_approval` (the callback's, or
 * the default deny), with attributes `loopwatch.approval.decision` (`approve` | `deny`),
 * `loopwatch.run_key`, `loop.pattern`, `loop.profile` (loopwatch's names for the
 * detection's pattern and profile), `loopwatch.signal.id` (a signal asked) and
 * `gen_ai.tool.name` (a pre-execution check asked).
 */
export const APPROVAL_EVENT = 'loopwatch.approval';

/** What the approval callback is asked about. */
export interface ApprovalRequest {
  /** Run key to approve or deny. */
  runKey: string;
  /** The `require_approval` signal (a loop detected on calls already made). */
  signal?: Signal;
  /** The check answer (a call about to be made would complete the loop). */
  check?: CheckResult;
  /** The tool about to be called, for a check. */
  toolName?: string;
  /** Its arguments, for a check. */
  arguments?: unknown;
  /** The text loopwatch wrote for the model / a human. */
  message: string;
}

/** Options of {@link Guard}. */
export interface GuardOptions extends ConnectionOptions {
  /** Trace id of the run (32 hex chars); signals are watched for it. */
  traceId: string;
  /** Run key, when loopwatch keys runs by an attribute; default the trace id. */
  runKey?: string;
  /**
   * The run's root span (set by `Loopwatch.run`): the `loopwatch.approval` event goes there
   * when no recording span of the run is active where the approval was asked.
   */
  span?: Span;
  /**
   * How signals are received and checks asked: `grpc` (default: `Signals/Watch` and
   * `Guard/Check` on the OTLP gRPC port), `http` (polling `GET /v1/signals`, `POST
   * /v1/check` on the admin port), `redis` (`SUBSCRIBE` to loopwatch's Redis sink; needs
   * the `redis` package), `nats` (a subscription to loopwatch's NATS sink; needs
   * `@nats-io/transport-node`) or an own {@link SignalTransport}. With `redis` and `nats`
   * the check goes to loopwatch over {@link GuardOptions.checkTransport}.
   */
  transport?: 'grpc' | 'http' | 'redis' | 'nats' | SignalTransport;
  /**
   * Options of the `redis` transport ({@link RedisTransportOptions}: `url`, `channel`, …) or
   * the `nats` one ({@link NatsTransportOptions}: `url`, `subjectPrefix`, …); a `checker`
   * given here replaces the one made from `checkTransport`.
   */
  transportOptions?: RedisTransportOptions | NatsTransportOptions;
  /**
   * How the `redis` and `nats` transports make the pre-execution check (a sink cannot):
   * `grpc` (default, `Guard/Check` on `grpcAddress`) or `http` (`POST /v1/check` on
   * `adminUrl`). The other transports check over their own connection.
   */
  checkTransport?: 'grpc' | 'http';
  /** Poll interval of the `http` transport, ms. Default 100. */
  pollIntervalMs?: number;
  /** Ask loopwatch before each tool call ({@link Guard.beforeToolCall}). Default false. */
  check?: boolean;
  /** Deadline of one check, ms. Default 2000. */
  checkTimeoutMs?: number;
  /**
   * What a failed check (loopwatch unreachable, deadline) does: `allow` the call (default;
   * the failure goes to `onError`) or `throw` the transport error.
   */
  onCheckError?: 'allow' | 'throw';
  /** Awaited before each check, e.g. to let the previous tool span reach loopwatch. */
  beforeCheck?: () => Promise<void>;
  /** A `warn` signal or check arrived; `message` is the nudge for the model. */
  onWarn?: (message: string, source: { signal?: Signal; check?: CheckResult }) => void;
  /** The run was stopped (kill signal, denied check, denied approval). */
  onStop?: (error: LoopDetectedError) => void;
  /**
   * A `require_approval` detection: resolve `true` to let the run go on (loopwatch resets
   * the loop's counters), `false` to stop it. Without a callback the run is stopped.
   */
  onApproval?: (request: ApprovalRequest) => boolean | Promise<boolean>;
  /** Transport failures the guard survived (a broken stream it reopens, a failed check). */
  onError?: (error: Error) => void;
}

/** One run's guard. Create with {@link Guard.start} (or `new` then {@link Guard.start}). */
export class Guard {
  /** Trace id watched, lowercase. */
  readonly traceId: string;
  /** Run key used for checks and approvals. */
  readonly runKey: string;
  /** Aborted (reason: the {@link LoopDetectedError}) when the run is stopped. */
  readonly signal: AbortSignal;
  /** Every signal received for the run, in arrival order (de-duplicated on id). */
  readonly signals: Signal[] = [];
  /** The admin API client (approvals, HTTP check and signals). */
  readonly admin: AdminClient;
  /** Epoch ms (fractional) when the run was stopped; undefined while it runs. */
  stoppedAtMs?: number;

  private readonly options: GuardOptions;
  private readonly connection: Connection;
  private readonly transport: SignalTransport;
  private readonly ownsTransport: boolean;
  private readonly controller = new AbortController();
  private readonly seen = new Set<string>();
  private readonly nudges: string[] = [];
  private subscription?: Subscription;
  private stopError?: LoopDetectedError;
  private approval?: Promise<boolean>;

  /**
   * @throws TypeError for a trace id that is not 32 hex chars, a bad address or an unknown
   *   transport name; `Error` (`code` `LOOPWATCH_MISSING_PACKAGE`) naming the package when
   *   the `redis` or `nats` transport's package is not installed.
   */
  constructor(options: GuardOptions) {
    if (!/^[0-9a-fA-F]{32}$/.test(options.traceId)) {
      throw new TypeError(`traceId must be 32 hex characters, got ${JSON.stringify(options.traceId)}`);
    }
    this.options = options;
    this.traceId = options.traceId.toLowerCase();
    this.runKey = options.runKey ?? this.traceId;
    this.signal = this.controller.signal;
    this.connection = resolveConnection(options);
    this.admin = new AdminClient(this.connection.adminUrl, this.connection.token);
    const transport = options.transport ?? 'grpc';
    this.ownsTransport = typeof transport === 'string';
    if (transport === 'grpc') {
      this.transport = new GrpcTransport({ target: this.connection.grpcTarget, token: this.connection.token });
    } else if (transport === 'http') {
      this.transport = new HttpTransport(this.admin, { pollIntervalMs: options.pollIntervalMs });
    } else if (transport === 'redis' || transport === 'nats') {
      const sinkOptions: RedisTransportOptions & NatsTransportOptions = { ...options.transportOptions };
      sinkOptions.checker ??=
        options.checkTransport === 'http'
          ? new HttpTransport(this.admin)
          : new GrpcTransport({ target: this.connection.grpcTarget, token: this.connection.token });
      this.transport = transport === 'redis' ? new RedisTransport(sinkOptions) : new NatsTransport(sinkOptions);
    } else if (typeof transport === 'string') {
      throw new TypeError(`transport must be grpc, http, redis or nats, got ${JSON.stringify(transport)}`);
    } else {
      this.transport = transport;
    }
  }

  /**
   * Creates a guard and waits until its subscription is in place, so no signal of the run
   * published from now on is missed.
   * @throws LoopwatchTransportError when loopwatch cannot be reached.
   */
  static async start(options: GuardOptions): Promise<Guard> {
    const guard = new Guard(options);
    await guard.start();
    return guard;
  }

  /** Opens the subscription; resolves when it is ready (see {@link Guard.start}). */
  async start(): Promise<this> {
    if (this.subscription) return this;
    this.subscription = this.transport.watch(
      { traceId: this.traceId },
      {
        onSignal: (s) => this.handleSignal(s),
        onError: (e) => this.options.onError?.(e),
        onReconnect: () => void this.catchUp(),
      },
    );
    try {
      await this.subscription.ready;
    } catch (error) {
      this.close();
      throw error;
    }
    return this;
  }

  /** After a broken stream: fetch what was published meanwhile from `GET /v1/signals`. */
  private async catchUp(): Promise<void> {
    try {
      for (const s of await this.admin.signals({ traceId: this.traceId })) this.handleSignal(s);
    } catch (error) {
      this.options.onError?.(error as Error);
    }
  }

  /** The error that stopped the run, or undefined while it may go on. */
  get stopped(): LoopDetectedError | undefined {
    return this.stopError;
  }

  /** Whether an approval is being decided (the run waits at its next step). */
  get awaitingApproval(): boolean {
    return this.approval !== undefined;
  }

  /** @throws LoopDetectedError when the run was stopped. */
  throwIfStopped(): void {
    if (this.stopError) throw this.stopError;
  }

  /** Nudge messages not yet handed to the model; they are removed from the guard. */
  takeNudges(): string[] {
    return this.nudges.splice(0, this.nudges.length);
  }

  /** Number of nudges waiting for {@link Guard.takeNudges}. */
  get pendingNudges(): number {
    return this.nudges.length;
  }

  /**
   * Processes one signal (called by the transport; public for own transports). Repeats of
   * an id are ignored; signals of other traces too.
   */
  handleSignal(signal: Signal): void {
    if (signal.trace_id.toLowerCase() !== this.traceId && signal.run_key !== this.runKey) return;
    if (this.seen.has(signal.id)) return;
    this.seen.add(signal.id);
    this.signals.push(signal);
    switch (signal.action) {
      case 'warn':
        this.nudge(signal.message, { signal });
        break;
      case 'kill':
        this.stop(new LoopDetectedError({ reason: 'kill', signal }));
        break;
      case 'require_approval':
        void this.requestApproval({ runKey: this.runKey, signal, message: signal.message }).catch(() => undefined);
        break;
    }
  }

  private nudge(message: string, source: { signal?: Signal; check?: CheckResult }): void {
    if (!message || this.stopError) return;
    if (!this.nudges.includes(message)) this.nudges.push(message);
    this.options.onWarn?.(message, source);
  }

  /** Stops the run with `error` (the first stop wins). */
  stop(error: LoopDetectedError): void {
    if (this.stopError) return;
    this.stopError = error;
    this.stoppedAtMs = performance.timeOrigin + performance.now();
    this.controller.abort(error);
    this.options.onStop?.(error);
  }

  /**
   * Asks the approval callback (one question at a time: a second request while one is
   * open shares its answer) and applies the answer at loopwatch: approve → `POST
   * /v1/runs/{key}/approve`; deny → `POST …/deny` and the run is stopped. Resolves true
   * when approved.
   */
  requestApproval(request: ApprovalRequest): Promise<boolean> {
    if (this.approval) return this.approval;
    const span = this.approvalSpan();
    const decide = async (): Promise<boolean> => {
      let approved = false;
      try {
        approved = this.options.onApproval ? Boolean(await this.options.onApproval(request)) : false;
      } catch (error) {
        this.options.onError?.(error as Error);
      }
      span?.addEvent(APPROVAL_EVENT, this.approvalAttributes(request, approved));
      if (approved) {
        await this.approve();
        return true;
      }
      // Stopped here first: the kill signal loopwatch publishes for the denial comes after.
      this.stop(
        new LoopDetectedError({
          reason: 'approval_denied',
          signal: request.signal,
          check: request.check,
          toolName: request.toolName,
        }),
      );
      try {
        await this.deny();
      } catch (error) {
        // 409: nothing awaits approval at loopwatch (a check asked before the call): the
        // run is stopped all the same.
        this.options.onError?.(error as Error);
      }
      return false;
    };
    this.approval = decide().finally(() => {
      this.approval = undefined;
    });
    return this.approval;
  }

  /**
   * Where the answer is recorded: the active span when it is recording and of this run's
   * trace (a framework's step span), else the run's root span ({@link GuardOptions.span}),
   * else nowhere (a span of another trace, e.g. the one active on a transport callback,
   * is not the agent's).
   */
  private approvalSpan(): Span | undefined {
    const active = trace.getActiveSpan();
    if (active?.isRecording() && active.spanContext().traceId === this.traceId) return active;
    return this.options.span?.isRecording() ? this.options.span : undefined;
  }

  /** Attributes of the `loopwatch.approval` event (names as in the Python client). */
  private approvalAttributes(request: ApprovalRequest, approved: boolean): Attributes {
    const attributes: Attributes = {
      'loopwatch.approval.decision': approved ? 'approve' : 'deny',
      'loopwatch.run_key': request.runKey,
      'loop.pattern': request.signal?.pattern ?? request.check?.pattern ?? '',
      'loop.profile': request.signal?.profile ?? request.check?.profile ?? '',
    };
    if (request.signal) attributes['loopwatch.signal.id'] = request.signal.id;
    if (request.toolName !== undefined) attributes['gen_ai.tool.name'] = request.toolName;
    return attributes;
  }

  /** `POST /v1/runs/{runKey}/approve`. @throws LoopwatchTransportError */
  approve(): Promise<ApprovalAnswer> {
    return this.admin.approve(this.runKey);
  }

  /** `POST /v1/runs/{runKey}/deny` (loopwatch publishes a kill signal). @throws LoopwatchTransportError */
  deny(): Promise<ApprovalAnswer> {
    return this.admin.deny(this.runKey);
  }

  /**
   * Call at the start of each agent step (before a model call): waits while an approval
   * is being decided, then throws if the run was stopped.
   * @throws LoopDetectedError
   */
  async beforeStep(): Promise<void> {
    while (this.approval) await this.approval;
    this.throwIfStopped();
  }

  /**
   * The pre-execution check, without acting on the answer.
   * @throws LoopwatchTransportError
   */
  check(toolName: string, args?: unknown): Promise<CheckResult> {
    return this.transport.check(
      { trace_id: this.traceId, run_key: this.options.runKey, tool_name: toolName, arguments: args },
      this.options.checkTimeoutMs ?? 2000,
    );
  }

  /**
   * Call before each tool call. Waits while an approval is decided and throws if the run
   * was stopped; with `check` on, asks loopwatch about this call and acts on the answer:
   * `warn` queues the nudge, `deny` stops the run, `require_approval` asks the approval
   * callback. Returns the check answer (undefined with `check` off or a failed check).
   * @throws LoopDetectedError when the call must not run.
   */
  async beforeToolCall(toolName: string, args?: unknown): Promise<CheckResult | undefined> {
    await this.beforeStep();
    if (!this.options.check) return undefined;
    await this.options.beforeCheck?.();
    let result: CheckResult;
    try {
      result = await this.check(toolName, args);
    } catch (error) {
      if (this.options.onCheckError === 'throw') throw error;
      this.options.onError?.(error as Error);
      this.throwIfStopped();
      return undefined;
    }
    switch (result.decision) {
      case 'warn':
        this.nudge(result.message, { check: result });
        break;
      case 'deny':
        this.stop(new LoopDetectedError({ reason: 'deny', check: result, toolName }));
        break;
      case 'require_approval':
        await this.requestApproval({ runKey: this.runKey, check: result, toolName, arguments: args, message: result.message });
        break;
      case 'allow':
        break;
    }
    this.throwIfStopped();
    return result;
  }

  /** Ends the subscription (and the transport's channel when the guard made it). */
  close(): void {
    this.subscription?.close();
    this.subscription = undefined;
    if (this.ownsTransport) this.transport.close();
  }
}
