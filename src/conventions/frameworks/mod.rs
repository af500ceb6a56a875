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
pub mod openinference;
pub mod openllmetry;
pub mod smolagents;
pub mod vercel_ai;
