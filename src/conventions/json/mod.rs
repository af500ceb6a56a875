//! JSON helpers the readers share: named fields of JSON text, and skipping what is not read.

pub mod fields;
pub mod skip;
