/**
 * A `loopwatch.signal.v1` record from its JSON text, as loopwatch's Redis and NATS sinks
 * (and webhooks) carry it: checked against `schemas/loopwatch.signal.v1.json`.
 */

import type { Signal } from '../types.js';
import { isSignalAction } from '../types.js';

const HEX32 = /^[0-9a-f]{32}$/;
const HEX16 = /^[0-9a-f]{16}$/;

/**
 * Parses one signal record. `time_unix_nano` (a JSON integer that can exceed 2^53) keeps
 * its exact digits, as a decimal string.
 *
 * @param text the JSON text (a string, or UTF-8 bytes).
 * @returns the signal, shaped as {@link Signal}.
 * @throws TypeError naming the first problem when `text` is not JSON, not an object, not
 *   schema `loopwatch.signal.v1`, or a required field is missing or of the wrong type
 *   (`id` / `trace_id` not 32 lowercase hex chars, an unknown `action`, …).
 */
export function signalFromJson(text: string | Uint8Array): Signal {
  const source = typeof text === 'string' ? text : new TextDecoder().decode(text);
  let raw: unknown;
  try {
    // Quote the integer before parsing so no digit is lost (inside a JSON string the
    // key's quotes are escaped, so only the real key matches).
    raw = JSON.parse(source.replace(/"time_unix_nano"\s*:\s*(\d+)/g, '"time_unix_nano":"$1"'));
  } catch (error) {
    throw new TypeError(`not JSON: ${(error as Error).message}`);
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw new TypeError('not a JSON object');
  const r = raw as Record<string, unknown>;
  if (r.schema !== 'loopwatch.signal.v1') throw new TypeError(`schema is ${JSON.stringify(r.schema)}, not "loopwatch.signal.v1"`);
  const str = (key: string, pattern?: RegExp): string => {
    const v = r[key];
    if (typeof v !== 'string' || (pattern && !pattern.test(v))) throw new TypeError(`bad ${key}: ${JSON.stringify(v)}`);
    return v;
  };
  const nullable = (key: string): string | null => {
    const v = r[key];
    if (v === null || v === undefined) return null;
    if (typeof v !== 'string') throw new TypeError(`bad ${key}: ${JSON.stringify(v)}`);
    return v;
  };
  const int = (key: string): number => {
    const v = r[key];
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 0) throw new TypeError(`bad ${key}: ${JSON.stringify(v)}`);
    return v;
  };
  const strings = (key: string, pattern?: RegExp): string[] => {
    const v = r[key];
    if (!Array.isArray(v) || v.some((s) => typeof s !== 'string' || (pattern && !pattern.test(s)))) {
      throw new TypeError(`bad ${key}: ${JSON.stringify(v)}`);
    }
    return v as string[];
  };
  if (!isSignalAction(r.action)) throw new TypeError(`bad action: ${JSON.stringify(r.action)}`);
  return {
    schema: r.schema,
    id: str('id', HEX32),
    occurrence: int('occurrence'),
    severity: str('severity'),
    time_unix_nano: str('time_unix_nano', /^\d+$/),
    trace_id: str('trace_id', HEX32),
    run_key: str('run_key'),
    service_name: nullable('service_name'),
    agent_name: nullable('agent_name'),
    profile: str('profile'),
    action: r.action,
    pattern: str('pattern'),
    tool_names: strings('tool_names'),
    count: int('count'),
    window: int('window'),
    fingerprints: strings('fingerprints', HEX16),
    span_ids: strings('span_ids', HEX16),
    first_span_id: str('first_span_id', HEX16),
    message: str('message'),
  };
}
