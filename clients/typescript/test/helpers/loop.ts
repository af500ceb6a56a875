/**
 * The looping tool every test agent calls: `fetch_url({url})` failing the same way each
 * time, so loopwatch sees the same call with the same result again and again
 * (`repeated_result`: nudge warns at 3, stop kills at 6 with the default profiles).
 */

import { nowMs } from './env.js';

export const URL_ARG = 'https://example.com/a';
export const ERROR_RESULT = 'Error: connection refused';
/** repeated_result threshold of the default `stop` profile (kill). */
export const KILL_THRESHOLD = 6;
/** repeated_result threshold of the default `nudge` profile (warn). */
export const WARN_THRESHOLD = 3;

/** Counts executions of the looping tool and when each ended. */
export class ToolLog {
  readonly ends: number[] = [];
  get calls(): number {
    return this.ends.length;
  }
  /** The tool body: returns the same error text every time. */
  run(): string {
    this.ends.push(nowMs());
    return ERROR_RESULT;
  }
  /** End time of the n-th call (1-based). */
  endOf(n: number): number | undefined {
    return this.ends[n - 1];
  }
}
