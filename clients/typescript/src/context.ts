/**
 * The run an agent step belongs to, carried through async calls (AsyncLocalStorage), so
 * framework integrations defined once (tools, middleware) find the guard of the run that
 * calls them.
 */

import { AsyncLocalStorage } from 'node:async_hooks';
import type { Guard } from './guard.js';

/** What a run makes available to the code it calls. */
export interface RunScope {
  /** The run's guard; undefined for a run without one. */
  guard?: Guard;
  /**
   * Resolves when the tool spans ended so far have been exported (acknowledged by
   * loopwatch); undefined when the tracer provider is not the client's.
   */
  flushed?: () => Promise<void>;
}

const storage = new AsyncLocalStorage<RunScope>();

/** Runs `fn` with `scope` as the current run. */
export function withRunScope<T>(scope: RunScope, fn: () => T): T {
  return storage.run(scope, fn);
}

/** The current run's scope, or undefined outside a run. */
export function currentScope(): RunScope | undefined {
  return storage.getStore();
}

/** The guard of the current run (`Loopwatch.run`), or undefined outside one. */
export function currentGuard(): Guard | undefined {
  return storage.getStore()?.guard;
}
