/**
 * loopwatch client: OpenTelemetry setup with prompt tool-span export, the run guard
 * (signals over gRPC `Watch`, HTTP polling, or loopwatch's Redis or NATS sink; the
 * pre-execution check; approvals) and the tool-call span helper. Framework integrations:
 * `@loopwatch/client/ai`, `@loopwatch/client/openai-agents`, `@loopwatch/client/langchain`.
 */

export { instrument, Loopwatch, type InstrumentOptions, type RunOptions, type RunGuardOptions } from './instrument.js';
export { Guard, APPROVAL_EVENT, type GuardOptions, type ApprovalRequest } from './guard.js';
export { LoopDetectedError, LoopwatchTransportError, STOPPED_EVENT, recordStop, type StopReason } from './errors.js';
export { traceToolCall, attributeText, TRACER_NAME, type ToolCall, type TraceToolCallOptions } from './tool-span.js';
export { ToolFlushSpanProcessor, isToolSpan, type ToolFlushOptions } from './processor.js';
export { currentGuard, currentScope, withRunScope, type RunScope } from './context.js';
export { resolveConnection, type ConnectionOptions, type Connection } from './config.js';
export { AdminClient, type SignalsQuery } from './transport/admin.js';
export { GrpcTransport, signalFromProto, checkFromWire, type GrpcTransportOptions } from './transport/grpc.js';
export { HttpTransport, type HttpTransportOptions } from './transport/http.js';
export { RedisTransport, DEFAULT_REDIS_URL, DEFAULT_REDIS_CHANNEL, type RedisTransportOptions } from './transport/redis.js';
export {
  NatsTransport,
  DEFAULT_NATS_URL,
  DEFAULT_NATS_SUBJECT_PREFIX,
  type NatsTransportOptions,
} from './transport/nats.js';
export { MISSING_PACKAGE, type CheckTransport, type SinkTransportOptions } from './transport/pubsub.js';
export { signalFromJson } from './transport/signal-json.js';
export type { SignalTransport, Subscription, SignalHandlers, WatchFilter } from './transport/transport.js';
export type {
  Signal,
  SignalAction,
  Decision,
  CheckRequest,
  CheckResult,
  ApprovalAnswer,
} from './types.js';
