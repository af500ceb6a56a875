//! Readers of attribute forms that frameworks have since replaced (older releases still in use).

pub mod adk;
pub mod mastra;
pub mod pydantic;
pub mod semantic_kernel;
pub mod strands;
