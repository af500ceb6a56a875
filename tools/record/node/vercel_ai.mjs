// Vercel AI SDK (`ai` on npm) with its own OpenTelemetry spans (`experimental_telemetry`).
//
// generateText runs the tool loop against `MockLanguageModelV3` from `ai/test`, which
// returns the scenario's next turn (tool-call parts, or the final text); tools return the
// scripted results. Spans go through the standard OTLP/gRPC exporter behind a
// BatchSpanProcessor to the capture receiver at --endpoint. Content capture off:
// `recordInputs: false, recordOutputs: false`.
import { execFileSync } from "node:child_process";
import { parseArgs } from "node:util";
import { generateText, stepCountIs, tool, jsonSchema } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import { NodeTracerProvider } from "@opentelemetry/sdk-trace-node";
import { BatchSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-grpc";
import { resourceFromAttributes } from "@opentelemetry/resources";

const { values: args } = parseArgs({
  options: {
    scenario: { type: "string" },
    out: { type: "string" },
    endpoint: { type: "string" },
    "no-content": { type: "boolean", default: false },
  },
});
const here = new URL("..", import.meta.url).pathname;
const script = JSON.parse(execFileSync("python3", [here + "scenarios.py", args.scenario]));

const provider = new NodeTracerProvider({
  resource: resourceFromAttributes({ "service.name": "record-vercel-ai" }),
  spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter({ url: args.endpoint }))],
});
provider.register();

const usage = {
  inputTokens: { total: 10, noCache: 10, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 5, text: 5, reasoning: undefined },
};
let step = 0;
const model = new MockLanguageModelV3({
  modelId: "scripted-fake",
  doGenerate: async () => {
    const turn = script.turns[step++];
    if (turn.text !== undefined) {
      return { content: [{ type: "text", text: turn.text }], finishReason: { unified: "stop", raw: undefined }, usage, warnings: [] };
    }
    return {
      content: turn.calls.map((c) => ({ type: "tool-call", toolCallId: c.id, toolName: c.tool, input: JSON.stringify(c.args) })),
      finishReason: { unified: "tool-calls", raw: undefined },
      usage,
      warnings: [],
    };
  },
});

// Each tool returns its scripted results in order.
const queues = {};
for (const t of script.turns) for (const c of t.calls ?? []) (queues[c.tool] ??= []).push(c.result);
const tools = {};
for (const [name, params] of Object.entries(script.tools)) {
  const properties = Object.fromEntries(params.map((p) => [p, { type: p === "limit" ? "integer" : "string" }]));
  tools[name] = tool({
    description: name,
    inputSchema: jsonSchema({ type: "object", properties, required: params }),
    execute: async () => queues[name].shift(),
  });
}

const content = !args["no-content"];
const result = await generateText({
  model,
  tools,
  prompt: `run scenario ${args.scenario}`,
  stopWhen: stepCountIs(50),
  experimental_telemetry: { isEnabled: true, functionId: "corpus_agent", recordInputs: content, recordOutputs: content },
});
await provider.shutdown();
console.log(`${args.scenario}: ${result.steps.length} steps`);
