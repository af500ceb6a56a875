/**
 * `instrument()`: OpenTelemetry tracing to loopwatch with prompt export of tool spans, and
 * `Loopwatch.run()`, which gives each agent run a trace (its id is the run key) and a guard
 * watching loopwatch's signals for it.
 */

import { Metadata } from '@grpc/grpc-js';
import { context, SpanKind, SpanStatusCode, trace, type Attributes, type Tracer } from '@opentelemetry/api';
import { OTLPTraceExporter as OTLPGrpcTraceExporter } from '@opentelemetry/exporter-trace-otlp-grpc';
import { OTLPTraceExporter as OTLPHttpTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import type { SpanExporter } from '@opentelemetry/sdk-trace-base';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import type { ConnectionOptions } from './config.js';
import { withRunScope } from './context.js';
import { recordStop } from './errors.js';
import { Guard, type GuardOptions } from './guard.js';
import { ToolFlushSpanProcessor, type ToolFlushOptions } from './processor.js';
import { TRACER_NAME } from './tool-span.js';

/** Guard settings shared by every run of a {@link Loopwatch}. */
export type RunGuardOptions = Omit<GuardOptions, 'traceId' | 'span' | keyof ConnectionOptions>;

/** Options of {@link instrument}. */
export interface InstrumentOptions extends ConnectionOptions, ToolFlushOptions {
  /** `service.name`; default env `OTEL_SERVICE_NAME`, else `agent`. */
  serviceName?: string;
  /** More resource attributes. */
  resourceAttributes?: Attributes;
  /**
   * OTLP endpoint spans go to (loopwatch's receiver). Default env
   * `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `OTEL_EXPORTER_OTLP_ENDPOINT`, else
   * `http://<grpcAddress>` (gRPC) or `http://127.0.0.1:4318/v1/traces` (HTTP).
   */
  otlpEndpoint?: string;
  /** `grpc` (default, env `OTEL_EXPORTER_OTLP_PROTOCOL`) or `http/json`. */
  protocol?: 'grpc' | 'http/json';
  /** Headers on OTLP exports (loopwatch's `[receiver.auth]` token). */
  otlpHeaders?: Record<string, string>;
  /** Own exporter instead of the OTLP one (tests, a collector in between). */
  exporter?: SpanExporter;
  /** Register as the global tracer provider and context manager. Default true. */
  register?: boolean;
  /** Defaults of every run's guard (transport, check, callbacks). */
  guard?: RunGuardOptions;
}

/** Options of one {@link Loopwatch.run}. */
export interface RunOptions extends RunGuardOptions {
  /** `gen_ai.agent.name` of the run's root span. */
  agentName?: string;
  /** Name of the root span; default `invoke_agent {agentName}` or `invoke_agent`. */
  spanName?: string;
  /**
   * When the run was stopped, reject with the `LoopDetectedError` whatever `fn` returned
   * or threw (a framework's abort error, a guardrail error). Default true.
   */
  throwOnStop?: boolean;
}

/** The client: a tracer provider exporting to loopwatch, and runs with guards. */
export class Loopwatch {
  /** The provider (registered globally unless `register: false`). */
  readonly provider: NodeTracerProvider;
  /** The processor exporting spans (tool spans at once). */
  readonly processor: ToolFlushSpanProcessor;
  /** Tracer of the client's spans. */
  readonly tracer: Tracer;
  private readonly options: InstrumentOptions;

  constructor(options: InstrumentOptions = {}) {
    this.options = options;
    const env = process.env;
    const protocol = options.protocol ?? (env.OTEL_EXPORTER_OTLP_PROTOCOL === 'http/json' ? 'http/json' : 'grpc');
    const exporter = options.exporter ?? makeExporter(protocol, options);
    this.processor = new ToolFlushSpanProcessor(exporter, options);
    this.provider = new NodeTracerProvider({
      resource: resourceFromAttributes({
        'service.name': options.serviceName ?? env.OTEL_SERVICE_NAME ?? 'agent',
        ...options.resourceAttributes,
      }),
      spanProcessors: [this.processor],
    });
    if (options.register !== false) this.provider.register();
    this.tracer = this.provider.getTracer(TRACER_NAME);
  }

  /**
   * Runs one agent run: starts its root span (a new trace, whose id is the run key), opens
   * its guard and waits until the guard's subscription is in place, then calls `fn` with
   * the guard inside the span's context, so every span the agent makes belongs to the run
   * and the integrations find the guard. Afterwards ends the span, closes the guard and
   * flushes. With `throwOnStop` (default) a run loopwatch stopped rejects with its
   * `LoopDetectedError`.
   * @throws LoopwatchTransportError when the guard cannot subscribe.
   */
  async run<T>(fn: (guard: Guard) => T | Promise<T>, options: RunOptions = {}): Promise<T> {
    const { agentName, spanName, throwOnStop, ...guardOptions } = options;
    const attributes: Attributes = { 'gen_ai.operation.name': 'invoke_agent' };
    if (agentName) attributes['gen_ai.agent.name'] = agentName;
    const span = this.tracer.startSpan(spanName ?? (agentName ? `invoke_agent ${agentName}` : 'invoke_agent'), {
      kind: SpanKind.INTERNAL,
      attributes,
      root: true,
    });
    const ctx = trace.setSpan(context.active(), span);
    const guard = new Guard({
      grpcAddress: this.options.grpcAddress,
      adminUrl: this.options.adminUrl,
      token: this.options.token,
      beforeCheck: () => this.processor.flushed(),
      ...this.options.guard,
      ...guardOptions,
      traceId: span.spanContext().traceId,
      span,
    });
    try {
      await guard.start();
    } catch (error) {
      span.setStatus({ code: SpanStatusCode.ERROR, message: (error as Error).message });
      span.end();
      throw error;
    }
    try {
      const result = await context.with(ctx, () =>
        withRunScope({ guard, flushed: () => this.processor.flushed() }, () => fn(guard)),
      );
      if (guard.stopped && throwOnStop !== false) throw guard.stopped;
      return result;
    } catch (error) {
      const thrown = guard.stopped && throwOnStop !== false ? guard.stopped : error;
      span.setStatus({ code: SpanStatusCode.ERROR, message: (thrown as Error)?.message ?? String(thrown) });
      throw thrown;
    } finally {
      if (guard.stopped) recordStop(span, guard.stopped);
      span.end();
      guard.close();
      await this.processor.forceFlush().catch(() => undefined);
    }
  }

  /** Resolves when every tool span ended so far has been exported. */
  flushed(): Promise<void> {
    return this.processor.flushed();
  }

  /** Exports every span ended so far. */
  forceFlush(): Promise<void> {
    return this.provider.forceFlush();
  }

  /** Flushes and shuts the provider down (and its exporter's connection). */
  shutdown(): Promise<void> {
    return this.provider.shutdown();
  }
}

function makeExporter(protocol: 'grpc' | 'http/json', options: InstrumentOptions): SpanExporter {
  const env = process.env;
  const configured = options.otlpEndpoint ?? env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ?? env.OTEL_EXPORTER_OTLP_ENDPOINT;
  if (protocol === 'http/json') {
    let url = configured ?? 'http://127.0.0.1:4318/v1/traces';
    if (!options.otlpEndpoint && !env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT && env.OTEL_EXPORTER_OTLP_ENDPOINT) {
      url = `${url.replace(/\/+$/, '')}/v1/traces`;
    }
    return new OTLPHttpTraceExporter({ url, headers: options.otlpHeaders });
  }
  const grpcAddress = options.grpcAddress ?? env.LOOPWATCH_GRPC_ADDRESS ?? '127.0.0.1:4317';
  const url = configured ?? (/^https?:\/\//.test(grpcAddress) ? grpcAddress : `http://${grpcAddress}`);
  // The gRPC exporter takes headers as metadata.
  const metadata = new Metadata();
  for (const [k, v] of Object.entries(options.otlpHeaders ?? {})) metadata.set(k.toLowerCase(), v);
  return new OTLPGrpcTraceExporter({ url, metadata });
}

/**
 * Sets up tracing to loopwatch (see {@link InstrumentOptions}) and returns the client.
 * Call once at start-up, before the agent framework creates its tracers.
 */
export function instrument(options: InstrumentOptions = {}): Loopwatch {
  return new Loopwatch(options);
}
