/**
 * Vercel AI SDK (`ai` v6; tested with 6.0) integration: a `stopWhen` condition, a tool wrapper, a
 * `prepareStep` that shows loopwatch's nudges to the model, and `withLoopwatch()` that
 * adds all three (and the run's abort signal) to `generateText` / `streamText` settings.
 *
 * ```ts
 * const lw = instrument();
 * await lw.run(() => generateText(withLoopwatch({ model, tools, prompt })));
 * ```
 */

import type { ModelMessage, PrepareStepFunction, StopCondition, ToolSet } from 'ai';
import { currentGuard } from '../context.js';
import type { Guard } from '../guard.js';
import { traceToolCall } from '../tool-span.js';

/** Which guard to use: a given one, else the current run's (`Loopwatch.run`). */
export interface AiGuardOptions {
  guard?: Guard;
}

function guardOf(options: AiGuardOptions): Guard | undefined {
  return options.guard ?? currentGuard();
}

/**
 * A `stopWhen` condition that is true once loopwatch stopped the run (kill signal, denied
 * check or approval). Combine with the SDK's own: `stopWhen: [stepCountIs(20), loopwatchStop()]`.
 */
export function loopwatchStop(options: AiGuardOptions = {}): StopCondition<ToolSet> {
  return () => guardOf(options)?.stopped !== undefined;
}

/**
 * Wraps every tool that has an `execute` so each call runs as a guarded `execute_tool`
 * span ({@link traceToolCall}): a stopped run (or, with `check` on, a call loopwatch would
 * deny) makes `execute` throw `LoopDetectedError`, which the SDK hands the model as a tool
 * error while `loopwatchStop()` ends the loop. Tools without `execute` are kept as they are.
 */
export function guardTools<TOOLS extends ToolSet>(tools: TOOLS, options: AiGuardOptions = {}): TOOLS {
  const wrapped: Record<string, unknown> = {};
  for (const [name, tool] of Object.entries(tools)) {
    const execute = tool.execute as ((input: unknown, o: { toolCallId: string }) => unknown) | undefined;
    if (typeof execute !== 'function') {
      wrapped[name] = tool;
      continue;
    }
    wrapped[name] = {
      ...tool,
      execute: (input: unknown, executionOptions: { toolCallId: string }) =>
        traceToolCall(
          { name, arguments: input, callId: executionOptions?.toolCallId },
          () => execute.call(tool, input, executionOptions),
          { guard: guardOf(options) ?? null },
        ),
    };
  }
  return wrapped as TOOLS;
}

/**
 * A `prepareStep` that waits while an approval is decided, and appends loopwatch's pending
 * nudges to the step's messages as one user message (`[loopwatch] …`), so the model reads
 * them before its next call. `inner` (the caller's own `prepareStep`) runs first.
 */
export function loopwatchPrepareStep<TOOLS extends ToolSet>(
  options: AiGuardOptions & { inner?: PrepareStepFunction<TOOLS> } = {},
): PrepareStepFunction<TOOLS> {
  return async (step) => {
    const base = (await options.inner?.(step)) ?? {};
    const guard = guardOf(options);
    if (!guard) return base;
    await guard.beforeStep().catch(() => undefined); // a stopped run ends via stopWhen / abort
    const nudges = guard.takeNudges();
    if (nudges.length === 0) return base;
    const messages: ModelMessage[] = [
      ...((base as { messages?: ModelMessage[] }).messages ?? step.messages),
      { role: 'user', content: nudges.map((n) => `[loopwatch] ${n}`).join('\n') },
    ];
    return { ...base, messages };
  };
}

/** The settings `withLoopwatch` reads and returns. */
interface LoopwatchableSettings<TOOLS extends ToolSet> {
  tools?: TOOLS;
  stopWhen?: StopCondition<NoInfer<TOOLS>> | Array<StopCondition<NoInfer<TOOLS>>>;
  prepareStep?: PrepareStepFunction<NoInfer<TOOLS>>;
  abortSignal?: AbortSignal;
}

/**
 * `generateText` / `streamText` settings with loopwatch added: tools wrapped
 * ({@link guardTools}), {@link loopwatchStop} added to `stopWhen` (the SDK's default
 * `stepCountIs(1)` is replaced by `stepCountIs(maxSteps)` when `stopWhen` was not given:
 * a guarded agent loops over tools), nudges through {@link loopwatchPrepareStep}, and the
 * run's abort signal (a kill also cancels a model call in flight) combined with
 * `abortSignal`. Must be called inside `Loopwatch.run` unless `guard` is given.
 * @throws Error when there is no guard.
 */
export function withLoopwatch<TOOLS extends ToolSet, S extends LoopwatchableSettings<TOOLS>>(
  settings: S & LoopwatchableSettings<TOOLS>,
  options: AiGuardOptions & { maxSteps?: number } = {},
): S {
  const guard = guardOf(options);
  if (!guard) throw new Error('withLoopwatch: call it inside Loopwatch.run(), or pass { guard }');
  const own = { guard };
  const stopWhen: Array<StopCondition<ToolSet>> =
    settings.stopWhen === undefined
      ? [stepCount(options.maxSteps ?? 50)]
      : ((Array.isArray(settings.stopWhen) ? settings.stopWhen : [settings.stopWhen]) as unknown as Array<StopCondition<ToolSet>>);
  return {
    ...settings,
    tools: settings.tools ? guardTools(settings.tools, own) : undefined,
    stopWhen: [...stopWhen, loopwatchStop(own)],
    prepareStep: loopwatchPrepareStep({ ...own, inner: settings.prepareStep as unknown as PrepareStepFunction<ToolSet> }),
    abortSignal: settings.abortSignal ? AbortSignal.any([settings.abortSignal, guard.signal]) : guard.signal,
  } as S;
}

/** Same as the SDK's `stepCountIs(n)` (kept local so `ai` stays a type-only import). */
function stepCount(n: number): StopCondition<ToolSet> {
  return ({ steps }) => steps.length >= n;
}
