/**
 * One tool call as a GenAI `execute_tool` span (OpenTelemetry GenAI semantic conventions),
 * guarded: the run's guard is asked first (stopped run → `LoopDetectedError`; with `check`
 * on, loopwatch's pre-execution check), the check's decision is recorded as
 * `gen_ai.tool.call.decision`, and the span is exported as soon as it ends.
 */

import { SpanKind, SpanStatusCode, trace, type Tracer } from '@opentelemetry/api';
import { currentScope } from './context.js';
import type { Guard } from './guard.js';

/** Instrumentation scope name of the client's spans. */
export const TRACER_NAME = '@loopwatch/client';

/** A tool call about to be made. */
export interface ToolCall {
  /** `gen_ai.tool.name`. */
  name: string;
  /** Arguments: an object (as parsed by the framework) or JSON / plain text. */
  arguments?: unknown;
  /** `gen_ai.tool.call.id`, when the model gave one. */
  callId?: string;
}

/** Options of {@link traceToolCall}. */
export interface TraceToolCallOptions<T = unknown> {
  /**
   * What to record as `gen_ai.tool.call.result` for the tool's return value (default the
   * value itself), e.g. a framework message's content without its per-call id.
   */
  result?: (value: T) => unknown;
  /** Guard to ask; default the current run's. `null`: no guard. */
  guard?: Guard | null;
  /** Tracer; default `trace.getTracer('@loopwatch/client')` of the global provider. */
  tracer?: Tracer;
  /**
   * Wait until the span has been exported before returning the result, so loopwatch holds
   * this call before the agent takes its next step. Default true (costs one loopback
   * round trip per tool call); has no effect outside `Loopwatch.run`.
   */
  awaitExport?: boolean;
}

/** JSON text of `value` for a span attribute (strings as they are). */
export function attributeText(value: unknown): string {
  if (typeof value === 'string') return value;
  if (value === undefined) return '';
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}

/**
 * Runs `fn` as the tool call `call`: asks the guard, then runs it inside an
 * `execute_tool {name}` span carrying `gen_ai.operation.name`, `gen_ai.tool.name`,
 * `gen_ai.tool.call.id`, `gen_ai.tool.call.arguments`, `gen_ai.tool.call.result` (JSON
 * text) and, when the check ran, `gen_ai.tool.call.decision`. A throwing tool ends the
 * span with status ERROR (its message) and the error is rethrown.
 * @throws LoopDetectedError (before the span is created) when the guard blocks the call.
 */
export async function traceToolCall<T>(
  call: ToolCall,
  fn: () => T | Promise<T>,
  options: TraceToolCallOptions<T> = {},
): Promise<T> {
  const scope = currentScope();
  const guard = options.guard === null ? undefined : (options.guard ?? scope?.guard);
  const decision = guard ? await guard.beforeToolCall(call.name, call.arguments) : undefined;
  const tracer = options.tracer ?? trace.getTracer(TRACER_NAME);
  const attributes: Record<string, string> = {
    'gen_ai.operation.name': 'execute_tool',
    'gen_ai.tool.name': call.name,
  };
  if (call.callId) attributes['gen_ai.tool.call.id'] = call.callId;
  if (call.arguments !== undefined) attributes['gen_ai.tool.call.arguments'] = attributeText(call.arguments);
  if (decision) attributes['gen_ai.tool.call.decision'] = decision.decision;
  const running = tracer.startActiveSpan(
    `execute_tool ${call.name}`,
    { kind: SpanKind.INTERNAL, attributes },
    async (span) => {
      try {
        const value = await fn();
        span.setAttribute('gen_ai.tool.call.result', attributeText(options.result ? options.result(value) : value));
        return value;
      } catch (error) {
        const message = error instanceof Error ? error.message : String(error);
        span.setStatus({ code: SpanStatusCode.ERROR, message });
        span.setAttribute('error.type', error instanceof Error ? error.name : 'Error');
        throw error;
      } finally {
        span.end();
      }
    },
  );
  try {
    return await running;
  } finally {
    if (options.awaitExport !== false && scope?.flushed) await scope.flushed();
  }
}
