#!/usr/bin/env bash
# Creates the recording environments (gitignored): one Python venv per framework under
# .venvs/, and node/node_modules for the npm frameworks. Versions are the ones the
# committed recordings were made with; change them to record another release.
set -euo pipefail
cd "$(dirname "$0")"
OTEL="opentelemetry-sdk==1.45.2 opentelemetry-exporter-otlp-proto-grpc==1.45.2"

venv() {  # venv NAME PACKAGES...
    local name=$1; shift
    [ -x ".venvs/$name/bin/python" ] || python3 -m venv ".venvs/$name"
    ".venvs/$name/bin/pip" install -q "$@"
}

venv capture opentelemetry-proto==1.45.2 grpcio==1.85.3
venv smolagents smolagents==1.26.0 openinference-instrumentation-smolagents==0.1.43 $OTEL
venv lc-openllmetry langchain-core==1.8.3 opentelemetry-instrumentation-langchain==0.62.4 $OTEL
# llama-index-llms-openai only provides the llama_index.llms package that OpenLLMetry's
# LlamaIndex instrumentation imports; nothing calls OpenAI.
venv llamaindex llama-index-core==0.14.25 llama-index-llms-openai==0.8.3 \
    openinference-instrumentation-llama-index==4.6.1 opentelemetry-instrumentation-llamaindex==0.62.4 $OTEL
venv oa-openllmetry openai-agents==0.24.0 opentelemetry-instrumentation-openai-agents==0.62.4 $OTEL
venv dspy dspy==3.4.1 openinference-instrumentation-dspy==0.1.48 $OTEL
venv sk semantic-kernel==1.45.0 $OTEL
venv autogen autogen-agentchat==0.7.5 autogen-ext==0.7.5 openinference-instrumentation-autogen-agentchat==0.1.22 $OTEL

(cd node && npm install --no-audit --no-fund --save-exact \
    ai@6.0.326 zod@4.6.7 @opentelemetry/api@1.9.1 @opentelemetry/sdk-trace-node@2.12.1 \
    @opentelemetry/sdk-trace-base@2.12.1 @opentelemetry/exporter-trace-otlp-grpc@0.223.1 \
    @opentelemetry/resources@2.12.1)
