//! One reader per instrumentation or framework convention, each for the attribute forms it writes today.

pub mod dspy;
pub mod genai;
pub mod google_genai;
pub mod haystack;
pub mod langfuse;
pub mod langsmith;
pub mod livekit;
pub mod llamaindex;
pub mod logfire_llm;
pub mod logfire_openai_agents;
pub mod mlflow;
pub mod openai_agents_otel;
pub mod openinference;
pub mod openllmetry;
pub mod smolagents;
pub mod tool_events;
pub mod vercel_ai;
