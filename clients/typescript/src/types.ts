/**
 * Wire shapes of loopwatch shared by both transports (gRPC and the admin HTTP API).
 *
 * Field names follow the JSON schema `loopwatch.signal.v1` (`schemas/loopwatch.signal.v1.json`)
 * and `proto/loopwatch/v1/*.proto`, snake_case as on the wire.
 */

/** What a signal asks the agent runtime to do. */
export type SignalAction = 'warn' | 'kill' | 'require_approval';

/** One loop signal, schema `loopwatch.signal.v1`. */
export interface Signal {
  /** Always `loopwatch.signal.v1`. */
  schema: string;
  /** Stable id of (run_key, profile, pattern, occurrence): 32 lowercase hex chars. */
  id: string;
  /** 1-based count of detections of this loop in the run. */
  occurrence: number;
  /** `info`, `warn` or `kill`. */
  severity: string;
  /**
   * End time of the span that completed the detection, ns since the Unix epoch, as a
   * decimal string (the value does not fit a JavaScript number exactly).
   */
  time_unix_nano: string;
  /** Trace id of the completing span, 32 lowercase hex chars. */
  trace_id: string;
  /** Run key: the trace id by default, or the configured attribute's value. */
  run_key: string;
  /** `service.name` of the resource; null when unknown. */
  service_name: string | null;
  /** `gen_ai.agent.name`; null when unknown. */
  agent_name: string | null;
  /** Detection profile, e.g. `nudge` or `stop`. */
  profile: string;
  /** `warn`, `kill` or `require_approval`. */
  action: SignalAction;
  /** Detected pattern, e.g. `repeated_call`, `repeated_result`, `alternating_calls`, `cycle`. */
  pattern: string;
  /** Tool names of the repeated calls. */
  tool_names: string[];
  /** Repetitions that formed the loop. */
  count: number;
  /** Window size (tool calls looked at) of the profile. */
  window: number;
  /** Short fingerprints (16 lowercase hex chars) of the repeated calls. */
  fingerprints: string[];
  /** Span ids (16 lowercase hex chars) of the calls that formed the loop, in start order. */
  span_ids: string[];
  /** Span id where the repetition began. */
  first_span_id: string;
  /** Nudge text an agent runtime can show the model. */
  message: string;
}

/** Answer of the pre-execution check. */
export type Decision = 'allow' | 'warn' | 'deny' | 'require_approval';

/** The call an agent is about to make (`POST /v1/check`, `loopwatch.v1.Guard/Check`). */
export interface CheckRequest {
  /** Trace id of the run (32 hex chars). Used when `run_key` is absent. */
  trace_id?: string;
  /** Run key, when runs are keyed by an attribute (`detection.run_key_attribute`). */
  run_key?: string;
  /** `gen_ai.tool.name` of the call. */
  tool_name: string;
  /**
   * The call's arguments: any JSON value (an object as the framework parsed it), or a
   * string holding JSON text or plain text. Absent: arguments unknown.
   */
  arguments?: unknown;
}

/** What loopwatch's detectors would decide if the call were made next. */
export interface CheckResult {
  /** `allow`, `warn`, `deny` (a kill profile would fire) or `require_approval`. */
  decision: Decision;
  /** Pattern that would fire; empty for `allow`. */
  pattern: string;
  /** Repetitions the pattern would count; 0 for `allow`. */
  count: number;
  /** Nudge text to show the model; empty for `allow`. */
  message: string;
  /** Profile that decided; empty for `allow`. */
  profile: string;
  /** Whether loopwatch holds state for this run (false: unknown run, answered `allow`). */
  known_run: boolean;
}

/** Answer of `POST /v1/runs/{run_key}/approve` and `/deny`. */
export interface ApprovalAnswer {
  run_key: string;
  /** `approve` or `deny`. */
  decision: string;
  /** approve: profiles whose loop counters were reset; deny: the profile of the detection. */
  profiles: string[];
  /** deny: id of the kill signal published. */
  signal_id?: string;
}

const ACTIONS: readonly string[] = ['warn', 'kill', 'require_approval'];
const DECISIONS: readonly string[] = ['allow', 'warn', 'deny', 'require_approval'];

/** Whether `value` is a known signal action. */
export function isSignalAction(value: unknown): value is SignalAction {
  return typeof value === 'string' && ACTIONS.includes(value);
}

/** Whether `value` is a known check decision. */
export function isDecision(value: unknown): value is Decision {
  return typeof value === 'string' && DECISIONS.includes(value);
}
