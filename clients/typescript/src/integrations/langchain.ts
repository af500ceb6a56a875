/**
 * LangChain.js v1 (`langchain` `createAgent`) integration: one middleware. `wrapToolCall`
 * runs each tool call as a guarded `execute_tool` span (a stopped run, or with `check`
 * on a call loopwatch answers `deny`, throws `LoopDetectedError` before the tool runs);
 * `beforeModel` waits while an approval is decided, throws when the run was stopped, and
 * adds pending nudges to the conversation as a user message (`[loopwatch] …`).
 *
 * ```ts
 * const lw = instrument();
 * const agent = createAgent({ model, tools, middleware: [loopwatchMiddleware()] });
 * await lw.run((guard) => agent.invoke({ messages }, { signal: guard.signal }));
 * ```
 */

import { createMiddleware, HumanMessage, ToolMessage } from 'langchain';
import { currentGuard } from '../context.js';
import type { Guard } from '../guard.js';
import { traceToolCall } from '../tool-span.js';

/** Options of {@link loopwatchMiddleware}. */
export interface LangChainGuardOptions {
  /** Guard to use; default the current run's (`Loopwatch.run`). */
  guard?: Guard;
}

/** What a tool call's result is recorded as: a ToolMessage's content, else the value. */
function resultOf(value: unknown): unknown {
  return ToolMessage.isInstance(value) ? value.content : value;
}

/** The loopwatch middleware for `createAgent({ middleware: [...] })`. */
export function loopwatchMiddleware(options: LangChainGuardOptions = {}) {
  const guardOf = (): Guard | undefined => options.guard ?? currentGuard();
  return createMiddleware({
    name: 'loopwatch',
    beforeModel: async () => {
      const guard = guardOf();
      if (!guard) return undefined;
      await guard.beforeStep();
      const nudges = guard.takeNudges();
      if (nudges.length === 0) return undefined;
      return { messages: [new HumanMessage(nudges.map((n) => `[loopwatch] ${n}`).join('\n'))] };
    },
    wrapToolCall: async (request, handler) => {
      const guard = guardOf();
      return traceToolCall(
        { name: request.toolCall.name, arguments: request.toolCall.args, callId: request.toolCall.id },
        () => handler(request),
        { guard: guard ?? null, result: resultOf },
      );
    },
  });
}
