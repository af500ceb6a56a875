/**
 * A span processor that exports tool spans at once: a batch processor with a short delay
 * for everything, plus a flush whenever a tool-call span ends, so loopwatch sees a tool
 * call while the agent is still deciding its next step (the SDK's default batch delay of
 * 5 s lets an agent make dozens of calls before loopwatch sees the first).
 */

import type { Context } from '@opentelemetry/api';
import {
  BatchSpanProcessor,
  type ReadableSpan,
  type Span,
  type SpanExporter,
  type SpanProcessor,
} from '@opentelemetry/sdk-trace-base';

/** Options of {@link ToolFlushSpanProcessor}. */
export interface ToolFlushOptions {
  /** Batch delay for spans that are not tool calls, ms. Default 200. */
  scheduledDelayMillis?: number;
  /** Most spans per export. Default 512. */
  maxExportBatchSize?: number;
  /** Most spans queued. Default 2048. */
  maxQueueSize?: number;
  /** Deadline of one export, ms. Default 10000. */
  exportTimeoutMillis?: number;
}

/**
 * Whether `span` records a tool call in one of the conventions loopwatch reads: GenAI
 * `execute_tool` (operation name or span name), the Vercel AI SDK's `ai.toolCall`,
 * OpenInference `TOOL`, OpenLLMetry `tool`, Mastra `tool.execute`.
 */
export function isToolSpan(span: ReadableSpan): boolean {
  const a = span.attributes;
  return (
    a['gen_ai.operation.name'] === 'execute_tool' ||
    span.name === 'execute_tool' ||
    span.name.startsWith('execute_tool ') ||
    span.name === 'ai.toolCall' ||
    a['openinference.span.kind'] === 'TOOL' ||
    a['traceloop.span.kind'] === 'tool' ||
    a['gen_ai.operation.name'] === 'tool.execute'
  );
}

/** Batch processor that flushes when a tool span ends; {@link flushed} awaits those flushes. */
export class ToolFlushSpanProcessor implements SpanProcessor {
  private readonly batch: BatchSpanProcessor;
  private pending: Promise<void> = Promise.resolve();
  private inFlight = 0;

  constructor(exporter: SpanExporter, options: ToolFlushOptions = {}) {
    this.batch = new BatchSpanProcessor(exporter, {
      scheduledDelayMillis: options.scheduledDelayMillis ?? 200,
      maxExportBatchSize: options.maxExportBatchSize ?? 512,
      maxQueueSize: options.maxQueueSize ?? 2048,
      exportTimeoutMillis: options.exportTimeoutMillis ?? 10000,
    });
  }

  onStart(span: Span, parentContext: Context): void {
    this.batch.onStart(span, parentContext);
  }

  onEnd(span: ReadableSpan): void {
    this.batch.onEnd(span);
    if (isToolSpan(span)) {
      this.inFlight += 1;
      const flush = this.batch.forceFlush().finally(() => {
        this.inFlight -= 1;
      });
      // Export failures are the exporter's to report (OTel diag); they must not reject here.
      this.pending = Promise.all([this.pending, flush.catch(() => undefined)]).then(() => undefined);
    }
  }

  /**
   * Resolves when every flush started by a tool span so far has finished (exported or
   * failed), i.e. loopwatch has acknowledged those spans.
   */
  flushed(): Promise<void> {
    return this.inFlight === 0 ? Promise.resolve() : this.pending;
  }

  forceFlush(): Promise<void> {
    return this.batch.forceFlush();
  }

  shutdown(): Promise<void> {
    return this.batch.shutdown();
  }
}
