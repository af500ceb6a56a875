/** Errors thrown by the loopwatch client. */

import type { Span } from '@opentelemetry/api';
import type { CheckResult, Signal } from './types.js';

/** Why a run was stopped. */
export type StopReason =
  /** A `kill` signal arrived for the run. */
  | 'kill'
  /** The pre-execution check answered `deny` for the call about to be made. */
  | 'deny'
  /** A `require_approval` detection was denied (by the approval callback or its absence). */
  | 'approval_denied';

/**
 * Thrown (and used as the abort reason of the run's `AbortSignal`) when loopwatch stops a
 * run. Carries what stopped it: the `kill` signal, or the check answer of the blocked call.
 */
export class LoopDetectedError extends Error {
  /** Why the run was stopped. */
  readonly reason: StopReason;
  /** The signal that stopped the run (`kill`, or the `require_approval` that was denied). */
  readonly signal?: Signal;
  /** The check answer that blocked a call (reason `deny`, or an approval denied before a call). */
  readonly check?: CheckResult;
  /** Tool name of the call that was blocked, when a check blocked it. */
  readonly toolName?: string;

  constructor(init: { reason: StopReason; signal?: Signal; check?: CheckResult; toolName?: string }) {
    super(describe(init));
    this.name = 'LoopDetectedError';
    this.reason = init.reason;
    this.signal = init.signal;
    this.check = init.check;
    this.toolName = init.toolName;
  }

  /** The detected pattern (`repeated_result`, …), from the signal or the check. */
  get pattern(): string {
    return this.signal?.pattern ?? this.check?.pattern ?? '';
  }
}

function describe(init: { reason: StopReason; signal?: Signal; check?: CheckResult; toolName?: string }): string {
  const text = init.signal?.message || init.check?.message || '';
  switch (init.reason) {
    case 'kill':
      return text || `loopwatch stopped the run: ${init.signal?.pattern || 'kill signal'}`;
    case 'deny':
      return `loopwatch blocked ${init.toolName ?? 'the call'} before it ran: ${text || init.check?.pattern || 'deny'}`;
    case 'approval_denied':
      return `loopwatch stopped the run: approval denied (${text || 'require_approval'})`;
  }
}

/** A transport failure talking to loopwatch (bad address, HTTP error status, gRPC error). */
export class LoopwatchTransportError extends Error {
  /** HTTP status or gRPC status code, when there was an answer. */
  readonly status?: number;

  constructor(message: string, status?: number, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'LoopwatchTransportError';
    this.status = status;
  }
}

/** Name of the span event a stopped run's span carries (the Python client's too). */
export const STOPPED_EVENT = 'loopwatch.stopped';

/**
 * Marks `span` (the run's span) as stopped by loopwatch, as both clients do: the attribute
 * `loopwatch.stopped` is the stop's reason (`kill`, `deny` or `approval_denied`), so a trace
 * query finds stopped runs, and the event `loopwatch.stopped` carries
 * `loopwatch.stop.action` (the same reason), `loopwatch.stop.pattern` (the detected pattern,
 * `''` when none was given) and `loopwatch.stop.message` (the error's message).
 */
export function recordStop(span: Span, stop: LoopDetectedError): void {
  span.setAttribute('loopwatch.stopped', stop.reason);
  span.addEvent(STOPPED_EVENT, {
    'loopwatch.stop.action': stop.reason,
    'loopwatch.stop.pattern': stop.pattern,
    'loopwatch.stop.message': stop.message,
  });
}
