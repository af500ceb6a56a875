//! Chat messages: tool-call and tool-response parts of input/output messages, and model responses.

pub mod model_response;
pub mod parts;
pub mod parts_text;
