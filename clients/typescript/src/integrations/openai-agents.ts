/**
 * OpenAI Agents JS SDK (`@openai/agents`) integration: a tool input guardrail asks the
 * run's guard before each function tool runs (stopped run or a `deny` check → the
 * guardrail trips and the run rejects), a tool output guardrail records the call as an
 * `execute_tool` span and waits until loopwatch has it, and `loopwatchRunOptions()` gives
 * `run()` the guard's abort signal and a `callModelInputFilter` that shows nudges.
 *
 * ```ts
 * const lw = instrument();
 * guardAgent(agent);
 * await lw.run(() => run(agent, input, loopwatchRunOptions()));
 * ```
 */

import { SpanKind, SpanStatusCode, trace, type Span } from '@opentelemetry/api';
import {
  defineToolInputGuardrail,
  defineToolOutputGuardrail,
  ToolGuardrailFunctionOutputFactory,
  type Agent,
  type CallModelInputFilter,
  type ToolInputGuardrailDefinition,
  type ToolOutputGuardrailDefinition,
} from '@openai/agents';
import { currentGuard, currentScope } from '../context.js';
import { LoopDetectedError } from '../errors.js';
import type { Guard } from '../guard.js';
import { attributeText, TRACER_NAME } from '../tool-span.js';

/** Name of both guardrails (shown in the SDK's guardrail results). */
export const GUARDRAIL_NAME = 'loopwatch';

/** Which guard to use: a given one, else the current run's (`Loopwatch.run`). */
export interface AgentsGuardOptions {
  guard?: Guard;
}

interface OpenCall {
  span: Span;
}

// Spans of calls between the input and the output guardrail, by call id.
const openCalls = new Map<string, OpenCall>();

function parseArguments(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/**
 * The input guardrail: `guard.beforeToolCall(name, arguments)` — a stopped run, or with
 * `check` on a call loopwatch answers `deny` (or an approval denied), trips the guardrail
 * (`throwException`: the run rejects, `Loopwatch.run` turns that into the
 * `LoopDetectedError`). An allowed call gets its `execute_tool` span started here, with the
 * check's decision as `gen_ai.tool.call.decision`.
 */
export function loopwatchInputGuardrail(options: AgentsGuardOptions = {}): ToolInputGuardrailDefinition {
  return defineToolInputGuardrail({
    name: GUARDRAIL_NAME,
    run: async ({ toolCall }) => {
      const guard = options.guard ?? currentGuard();
      const args = parseArguments(toolCall.arguments);
      let decision: string | undefined;
      if (guard) {
        try {
          decision = (await guard.beforeToolCall(toolCall.name, args))?.decision;
        } catch (error) {
          if (error instanceof LoopDetectedError) {
            return ToolGuardrailFunctionOutputFactory.throwException({
              reason: error.reason,
              pattern: error.pattern,
              message: error.message,
            });
          }
          throw error;
        }
      }
      const attributes: Record<string, string> = {
        'gen_ai.operation.name': 'execute_tool',
        'gen_ai.tool.name': toolCall.name,
        'gen_ai.tool.call.id': toolCall.callId,
        'gen_ai.tool.call.arguments': toolCall.arguments,
      };
      if (decision) attributes['gen_ai.tool.call.decision'] = decision;
      const span = trace
        .getTracer(TRACER_NAME)
        .startSpan(`execute_tool ${toolCall.name}`, { kind: SpanKind.INTERNAL, attributes });
      openCalls.get(toolCall.callId)?.span.end();
      openCalls.set(toolCall.callId, { span });
      return ToolGuardrailFunctionOutputFactory.allow();
    },
  });
}

/**
 * The output guardrail: ends the call's span with `gen_ai.tool.call.result` (an error text
 * from the SDK's `errorFunction` ends it with status ERROR when it starts with
 * `An error occurred`) and waits until the span is exported, so loopwatch holds the call
 * before the model's next turn. Always allows the output.
 */
export function loopwatchOutputGuardrail(): ToolOutputGuardrailDefinition {
  return defineToolOutputGuardrail({
    name: GUARDRAIL_NAME,
    run: async ({ toolCall, output }) => {
      const open = openCalls.get(toolCall.callId);
      if (open) {
        openCalls.delete(toolCall.callId);
        const text = attributeText(output);
        open.span.setAttribute('gen_ai.tool.call.result', text);
        if (text.startsWith('An error occurred')) open.span.setStatus({ code: SpanStatusCode.ERROR, message: text });
        open.span.end();
        await currentScope()?.flushed?.();
      }
      return ToolGuardrailFunctionOutputFactory.allow();
    },
  });
}

/**
 * Adds the loopwatch guardrails to every function tool of `agent` (and of the agents it
 * hands off to), once. Tools are changed in place: their identity matters to the SDK.
 * Returns `agent`.
 */
export function guardAgent<A extends Agent<any, any>>(agent: A, options: AgentsGuardOptions = {}): A {
  const seen = new Set<unknown>();
  const visit = (a: Agent<any, any>): void => {
    if (seen.has(a)) return;
    seen.add(a);
    for (const tool of a.tools) {
      if (tool.type !== 'function') continue;
      const inputs = tool.inputGuardrails ?? [];
      if (!inputs.some((g) => g.name === GUARDRAIL_NAME)) {
        tool.inputGuardrails = [loopwatchInputGuardrail(options), ...inputs];
        tool.outputGuardrails = [...(tool.outputGuardrails ?? []), loopwatchOutputGuardrail()];
      }
    }
    for (const h of a.handoffs) {
      if ('tools' in h && Array.isArray((h as Agent<any, any>).tools)) visit(h as Agent<any, any>);
    }
  };
  visit(agent);
  return agent;
}

/**
 * A `callModelInputFilter` that, before each model call, waits while an approval is
 * decided, throws `LoopDetectedError` when the run was stopped, and appends pending nudges
 * as one user message (`[loopwatch] …`). `inner` (your own filter) runs first.
 */
export function loopwatchInputFilter(options: AgentsGuardOptions & { inner?: CallModelInputFilter } = {}): CallModelInputFilter {
  return async (args) => {
    const data = options.inner ? await options.inner(args) : args.modelData;
    const guard = options.guard ?? currentGuard();
    if (!guard) return data;
    await guard.beforeStep();
    const nudges = guard.takeNudges();
    if (nudges.length === 0) return data;
    return {
      ...data,
      input: [
        ...data.input,
        { role: 'user', content: nudges.map((n) => `[loopwatch] ${n}`).join('\n') },
      ],
    };
  };
}

/**
 * Options for `run(agent, input, …)`: the guard's abort `signal` (a kill cancels the run
 * at once) and {@link loopwatchInputFilter}. Spread your own options after it.
 * @throws Error outside `Loopwatch.run` without `guard`.
 */
export function loopwatchRunOptions(options: AgentsGuardOptions = {}): {
  signal: AbortSignal;
  callModelInputFilter: CallModelInputFilter;
} {
  const guard = options.guard ?? currentGuard();
  if (!guard) throw new Error('loopwatchRunOptions: call it inside Loopwatch.run(), or pass { guard }');
  return { signal: guard.signal, callModelInputFilter: loopwatchInputFilter({ guard }) };
}
