//! The OTLP protobuf wire format on the span path, read and edited in place.
//!
//! A received `ExportTraceServiceRequest` is kept as the `Bytes` it arrived in.
//! [`WireRequest::read`] validates it exactly as prost would (minus UTF-8: a string that is
//! not valid UTF-8 is read lossily and never fails the request; plus the spans' ids: one of
//! the wrong length leaves its span out, as the Collector would refuse it), locates every
//! span by byte range and materialises only what detection reads. [`annotate::rewrite_pieces`] appends
//! `loop.*` attributes to the spans that complete a detection and rewrites only the
//! enclosing length prefixes (span → scope_spans → resource_spans); an unannotated
//! request is forwarded byte for byte.
//!
//! - [`reader`]: fields of one message over a borrowed buffer (`prost::encoding` primitives)
//!   and the [`reader::ValueBudget`] of a request.
//! - [`schema`]: the OTLP trace schema and the validating walk.
//! - [`decode`]: lossy materialisation into opentelemetry-proto types (resource attributes).
//! - [`view`]: the borrowed span views detection reads ([`crate::otlp::view`]).
//! - [`request`]: the request walk (resources, spans, locations).
//! - [`annotate`]: the in-place rewrite.

pub mod decode;
pub mod prune;
pub mod reader;
pub mod request;
pub mod schema;
pub mod view;

pub use reader::WireError;
pub use request::{ReadLimits, RejectedSpan, WireRequest, WireResource, WireSpan};
