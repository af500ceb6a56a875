//! The offline commands beside `serve`: `scan` and `explain` read recorded OTLP exports
//! through the same engine as the server; `replay` sends them to a receiver.

pub mod explain;
pub mod inject;
pub mod replay;
pub mod scan;
