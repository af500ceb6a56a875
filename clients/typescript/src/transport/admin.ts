/**
 * loopwatch's admin HTTP API, with the global `fetch`: `GET /v1/signals`, `POST /v1/check`,
 * `POST /v1/runs/{run_key}/approve` and `/deny`.
 */

import { LoopwatchTransportError } from '../errors.js';
import type { ApprovalAnswer, CheckRequest, CheckResult, Signal, SignalAction } from '../types.js';
import { isSignalAction } from '../types.js';
import { checkFromWire } from './grpc.js';

/** Query of `GET /v1/signals`; every field optional. */
export interface SignalsQuery {
  /** Exact trace id. */
  traceId?: string;
  /** Only signals whose `time_unix_nano >= since` (ns since the Unix epoch, decimal string). */
  since?: string;
  action?: SignalAction;
}

/** Client of one loopwatch's admin API. */
export class AdminClient {
  /**
   * @param baseUrl admin base URL without a trailing slash, e.g. `http://127.0.0.1:8787`
   * @param token `admin.auth_token`, sent as `Authorization: Bearer <token>`
   */
  constructor(
    readonly baseUrl: string,
    private readonly token?: string,
  ) {}

  private async request(method: string, path: string, body: unknown, timeoutMs: number): Promise<string> {
    const headers: Record<string, string> = {};
    if (this.token) headers.authorization = `Bearer ${this.token}`;
    if (body !== undefined) headers['content-type'] = 'application/json';
    let response: Response;
    try {
      response = await fetch(this.baseUrl + path, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(timeoutMs),
      });
    } catch (error) {
      throw new LoopwatchTransportError(`loopwatch ${method} ${path}: ${(error as Error).message}`, undefined, {
        cause: error,
      });
    }
    const text = await response.text();
    if (!response.ok) {
      let detail = text;
      try {
        detail = (JSON.parse(text) as { error?: string }).error ?? text;
      } catch {
        // not JSON: keep the text
      }
      throw new LoopwatchTransportError(`loopwatch ${method} ${path}: HTTP ${response.status}: ${detail}`, response.status);
    }
    return text;
  }

  /**
   * `GET /v1/signals`: recent signals of this loopwatch process, oldest first.
   * @throws LoopwatchTransportError on a network error or non-2xx answer.
   */
  async signals(query: SignalsQuery = {}, timeoutMs = 5000): Promise<Signal[]> {
    const params = new URLSearchParams();
    if (query.traceId) params.set('trace_id', query.traceId);
    if (query.since) params.set('since', query.since);
    if (query.action) params.set('action', query.action);
    const qs = params.toString();
    const text = await this.request('GET', `/v1/signals${qs ? `?${qs}` : ''}`, undefined, timeoutMs);
    // time_unix_nano exceeds 2^53: keep its digits by quoting it before parsing.
    const parsed = JSON.parse(text.replace(/"time_unix_nano"\s*:\s*(\d+)/g, '"time_unix_nano":"$1"')) as {
      data?: unknown[];
    };
    return (parsed.data ?? []).flatMap((raw) => {
      const s = raw as Record<string, unknown>;
      if (!isSignalAction(s.action)) return [];
      return [
        {
          ...(s as unknown as Signal),
          time_unix_nano: String(s.time_unix_nano ?? '0'),
          service_name: (s.service_name as string | null | undefined) ?? null,
          agent_name: (s.agent_name as string | null | undefined) ?? null,
        },
      ];
    });
  }

  /**
   * `POST /v1/check`: the pre-execution check.
   * @throws LoopwatchTransportError on a network error, non-2xx answer (400 for a request
   * naming no run or no tool) or an answer that is not a check result.
   */
  async check(request: CheckRequest, timeoutMs = 2000): Promise<CheckResult> {
    const body: Record<string, unknown> = { tool_name: request.tool_name };
    if (request.trace_id) body.trace_id = request.trace_id;
    if (request.run_key) body.run_key = request.run_key;
    if (request.arguments !== undefined) body.arguments = request.arguments;
    const text = await this.request('POST', '/v1/check', body, timeoutMs);
    const result = checkFromWire(JSON.parse(text) as Record<string, unknown>);
    if (!result) throw new LoopwatchTransportError(`loopwatch POST /v1/check: unexpected answer ${text}`);
    return result;
  }

  /**
   * `POST /v1/runs/{runKey}/approve`: the run goes on with its loop counters reset.
   * @throws LoopwatchTransportError (404: loopwatch does not hold the run).
   */
  async approve(runKey: string, timeoutMs = 5000): Promise<ApprovalAnswer> {
    const text = await this.request('POST', `/v1/runs/${encodeURIComponent(runKey)}/approve`, undefined, timeoutMs);
    return JSON.parse(text) as ApprovalAnswer;
  }

  /**
   * `POST /v1/runs/{runKey}/deny`: loopwatch publishes a `kill` signal for the run.
   * @throws LoopwatchTransportError (404: unknown run; 409: no detection awaits approval).
   */
  async deny(runKey: string, timeoutMs = 5000): Promise<ApprovalAnswer> {
    const text = await this.request('POST', `/v1/runs/${encodeURIComponent(runKey)}/deny`, undefined, timeoutMs);
    return JSON.parse(text) as ApprovalAnswer;
  }
}
