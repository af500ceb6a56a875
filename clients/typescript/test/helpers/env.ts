/**
 * Test prerequisites. Under CI (env CI set) a missing server binary fails the test; on a
 * developer machine the test is skipped with the reason.
 */

import { existsSync } from 'node:fs';
import type { TestContext } from 'node:test';
import { loopwatchBin } from './server.js';

/** True when the loopwatch binary exists; else skips (locally) or throws (under CI). */
export function requireServerBinary(t: TestContext): boolean {
  if (existsSync(loopwatchBin())) return true;
  const reason = `loopwatch binary not found at ${loopwatchBin()} (build it or set LOOPWATCH_BIN)`;
  if (process.env.CI) throw new Error(reason);
  t.skip(reason);
  return false;
}

/** Percentile `p` (0..100) of `values` (nearest rank). */
export function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank]!;
}

/** Epoch ms with sub-ms precision (same clock as Guard.stoppedAtMs). */
export function nowMs(): number {
  return performance.timeOrigin + performance.now();
}

/** Whether the loopwatch binary exists (for `before` hooks; tests call requireServerBinary). */
export function serverBinaryExists(): boolean {
  return existsSync(loopwatchBin());
}
