//! Signals (DESIGN §6): the `loopwatch.signal.v1` record and its sinks.
//!
//! The caller (pipeline) builds a [`Signal`] for each detection whose action is `warn`
//! or `kill` and hands it to [`SignalHub::publish`], which never blocks nor fails. The hub
//! fans it out to each configured sink ([`redis`], [`nats`], [`webhook`]), each with its
//! own bounded queue and retrying task, keeps a ring of recent signals for
//! `GET /v1/signals` ([`http`]) and feeds the gRPC stream `loopwatch.v1.Signals/Watch`
//! ([`grpc`]).

pub mod class_queue;

pub mod config;
pub mod grpc;
pub mod http;
pub mod hub;
pub mod nats;
pub mod redis;
mod sink;
pub mod sink_queue;
pub mod webhook;

pub use config::{NatsSinkConfig, RedisSinkConfig, RetryConfig, SignalsConfig, WebhookSinkConfig};
pub use grpc::signals_service;
pub use hub::{DeferredSignal, SignalHub, SinkStats};

pub use compact_str::CompactString;
use compact_str::ToCompactString;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use smallvec::SmallVec;

pub use crate::detector::{Action, Severity};

/// Value of [`Signal::schema`]: the schema name and version of the record.
pub const SIGNAL_SCHEMA: &str = "loopwatch.signal.v1";

/// [`Signal::tool_names`] and [`Signal::fingerprints`]: a list of strings, serialized as a
/// JSON array of strings. Up to two entries (one for most patterns, two for
/// alternating_calls) are held inline in the signal; a cycle's three or more take one
/// allocation, as a `Vec` would.
pub type SignalStrings = SmallVec<[CompactString; 2]>;

/// A loop signal, schema `loopwatch.signal.v1` (`schemas/loopwatch.signal.v1.json`).
///
/// Text fields are [`CompactString`]s: ids, names and short fingerprints of up to 24 bytes
/// are held inline, and so are one or two tool names and fingerprints ([`SignalStrings`]),
/// so a signal is a handful of allocations (a loop storm publishes one per detection).
/// They serialize as plain JSON strings (lists as JSON arrays of strings) and convert from
/// and into `String` and `&str` with `.into()`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Signal {
    /// Always `"loopwatch.signal.v1"`.
    pub schema: CompactString,
    /// Stable for the same (run_key, profile, pattern, loop fingerprints, occurrence):
    /// lowercase hex, 32 chars ([`signal_id`]).
    pub id: CompactString,
    /// 1-based count of detections of this loop (same profile, pattern, fingerprints) in the run.
    pub occurrence: u32,
    /// The detection's severity; on the wire `"info"`, `"warn"` or `"kill"` (a published
    /// signal is never `info`: progress does not signal).
    pub severity: Severity,
    /// End time (ns since the Unix epoch) of the span that completed the detection.
    pub time_unix_nano: u64,
    /// Lowercase hex trace_id of the completing span.
    pub trace_id: CompactString,
    /// The run key (trace_id hex by default, or the configured attribute's value).
    pub run_key: CompactString,
    pub service_name: Option<CompactString>,
    pub agent_name: Option<CompactString>,
    pub profile: CompactString,
    /// What the agent runtime is asked to do; on the wire `"warn"` or `"kill"`.
    pub action: Action,
    pub pattern: CompactString,
    /// Tool names of the loop in pattern order (`[A, B]` for alternating_calls, the p calls
    /// of a cycle, one name otherwise; empty for repeated_text and for a budget that is not
    /// a tool's); a JSON array of strings.
    pub tool_names: SignalStrings,
    pub count: u32,
    pub window: u32,
    /// Short external fingerprints (16 hex chars) of the repeated calls, in pattern order;
    /// a JSON array of strings.
    pub fingerprints: SignalStrings,
    /// Hex span_ids (16 chars each) of the calls that formed the loop, in start order; a
    /// JSON array of strings. A `Vec`, not inline: a loop is 3 to 18 calls under the
    /// built-in profiles, too many to hold in every signal.
    pub span_ids: Vec<CompactString>,
    pub first_span_id: CompactString,
    /// A nudge text an agent runtime can inject into the conversation.
    pub message: String,
}

/// Signal id: the first 32 lowercase hex chars of SHA-256 over
/// `run_key \0 profile \0 pattern \0 fingerprints \0 occurrence` (the loop's internal
/// SHA-256 call fingerprints, 32 bytes each, in pattern order; occurrence in decimal).
///
/// Stable across re-delivery and restarts for the same detection, so consumers (and the
/// NATS JetStream duplicate window, which gets it as `Nats-Msg-Id`) de-duplicate on it.
/// The fingerprints tell apart two loops of one pattern in one run, whose occurrences
/// both start at 1 (`occurrence` counts re-detections of the same loop).
pub fn signal_id(
    run_key: &str,
    profile: &str,
    pattern: &str,
    fingerprints: &[crate::fingerprint::Fingerprint],
    occurrence: u32,
) -> compact_str::CompactString {
    let mut hasher = Sha256::new();
    hasher.update(run_key.as_bytes());
    hasher.update([0u8]);
    hasher.update(profile.as_bytes());
    hasher.update([0u8]);
    hasher.update(pattern.as_bytes());
    hasher.update([0u8]);
    for fingerprint in fingerprints {
        hasher.update(fingerprint);
    }
    hasher.update([0u8]);
    // Decimal digits, held inline (no allocation).
    hasher.update(occurrence.to_compact_string().as_bytes());
    // The first 16 bytes in hex: the 32 characters written straight into the id.
    crate::otlp::compact_hex(&hasher.finalize()[..16])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_id_is_stable_short_lowercase_hex() {
        let id = signal_id(
            "4bf92f3577b34da6a3ce929d0e0e4736",
            "stop",
            "repeated_call",
            &[],
            1,
        );
        assert_eq!(id.len(), 32);
        assert!(id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        assert_eq!(
            id,
            signal_id(
                "4bf92f3577b34da6a3ce929d0e0e4736",
                "stop",
                "repeated_call",
                &[],
                1
            )
        );
        // sha256("run\0stop\0cycle\0\02") computed independently with Python hashlib.
        assert_eq!(
            signal_id("run", "stop", "cycle", &[], 2),
            "14c3f61e28209b1c3c4b286ba254f5b8"
        );
    }

    #[test]
    fn json_schema_lists_exactly_the_serialized_fields() {
        let schema: serde_json::Value =
            serde_json::from_str(include_str!("../../schemas/loopwatch.signal.v1.json"))
                .expect("schema is JSON");
        assert_eq!(schema["properties"]["schema"]["const"], SIGNAL_SCHEMA);
        let signal = Signal {
            schema: SIGNAL_SCHEMA.into(),
            id: signal_id("r", "stop", "cycle", &[], 1),
            occurrence: 1,
            severity: Severity::Kill,
            time_unix_nano: 1,
            trace_id: "0".repeat(32).into(),
            run_key: "r".into(),
            service_name: None,
            agent_name: None,
            profile: "stop".into(),
            action: Action::Kill,
            pattern: "cycle".into(),
            tool_names: SignalStrings::new(),
            count: 6,
            window: 20,
            fingerprints: SignalStrings::new(),
            span_ids: vec![],
            first_span_id: "0".repeat(16).into(),
            message: String::new(),
        };
        let json = serde_json::to_value(&signal).expect("signal serializes");
        let mut fields: Vec<&str> = json
            .as_object()
            .expect("object")
            .keys()
            .map(String::as_str)
            .collect();
        fields.sort_unstable();
        let mut required: Vec<&str> = schema["required"]
            .as_array()
            .expect("required array")
            .iter()
            .filter_map(|v| v.as_str())
            .collect();
        required.sort_unstable();
        let mut properties: Vec<&str> = schema["properties"]
            .as_object()
            .expect("properties object")
            .keys()
            .map(String::as_str)
            .collect();
        properties.sort_unstable();
        assert_eq!(fields, required);
        assert_eq!(fields, properties);
        for (name, property) in schema["properties"].as_object().expect("properties") {
            let doc = property["description"].as_str().unwrap_or_default();
            assert!(!doc.is_empty(), "{name} has no description");
        }
    }

    #[test]
    fn severity_and_action_keep_their_lowercase_wire_names() {
        for (severity, name) in [
            (Severity::Info, "info"),
            (Severity::Warn, "warn"),
            (Severity::Kill, "kill"),
        ] {
            assert_eq!(
                serde_json::to_string(&severity).unwrap(),
                format!("\"{name}\"")
            );
            assert_eq!(name.parse::<Severity>(), Ok(severity));
        }
        for (action, name) in [(Action::Warn, "warn"), (Action::Kill, "kill")] {
            assert_eq!(
                serde_json::to_string(&action).unwrap(),
                format!("\"{name}\"")
            );
            assert_eq!(name.parse::<Action>(), Ok(action));
        }
        // A record as loopwatch.signal.v1 consumers have always received it reads back
        // and serializes byte for byte the same.
        let wire = r#"{"schema":"loopwatch.signal.v1","id":"14c3f61e28209b1c3c4b286ba254f5b8","occurrence":2,"severity":"warn","time_unix_nano":7,"trace_id":"00000000000000000000000000000001","run_key":"r","service_name":"svc","agent_name":null,"profile":"nudge","action":"warn","pattern":"cycle","tool_names":["a","b"],"count":3,"window":10,"fingerprints":["0123456789abcdef"],"span_ids":["0000000000000001"],"first_span_id":"0000000000000001","message":"m"}"#;
        let signal: Signal = serde_json::from_str(wire).expect("reads");
        assert_eq!(
            (signal.severity, signal.action),
            (Severity::Warn, Action::Warn)
        );
        assert_eq!(serde_json::to_string(&signal).unwrap(), wire);
        for bad in [
            wire.replace(r#""action":"warn""#, r#""action":"stop""#),
            wire.replace(r#""severity":"warn""#, r#""severity":"Warn""#),
        ] {
            assert!(serde_json::from_str::<Signal>(&bad).is_err(), "{bad}");
        }
        assert_eq!(
            "stop".parse::<Action>().unwrap_err().to_string(),
            r#"unknown action "stop": expected "warn", "kill" or "require_approval""#
        );
    }

    #[test]
    fn two_tool_names_and_two_fingerprints_serialize_as_before() {
        let signal = Signal {
            schema: SIGNAL_SCHEMA.into(),
            id: "14c3f61e28209b1c3c4b286ba254f5b8".into(),
            occurrence: 1,
            severity: Severity::Warn,
            time_unix_nano: 7,
            trace_id: "00000000000000000000000000000001".into(),
            run_key: "r".into(),
            service_name: Some("svc".into()),
            agent_name: None,
            profile: "nudge".into(),
            action: Action::Warn,
            pattern: "alternating_calls".into(),
            tool_names: smallvec::smallvec!["search".into(), "fetch_url".into()],
            count: 3,
            window: 10,
            fingerprints: smallvec::smallvec!["0123456789abcdef".into(), "fedcba9876543210".into()],
            span_ids: vec!["0000000000000001".into(), "0000000000000002".into()],
            first_span_id: "0000000000000001".into(),
            message: "m".into(),
        };
        assert!(!signal.tool_names.spilled() && !signal.fingerprints.spilled());
        let json = serde_json::to_string(&signal).expect("serializes");
        assert!(
            json.contains(r#","tool_names":["search","fetch_url"],"#),
            "{json}"
        );
        assert!(
            json.contains(r#","fingerprints":["0123456789abcdef","fedcba9876543210"],"#),
            "{json}"
        );
        // The whole record, as the `Vec` fields wrote it.
        let wire = r#"{"schema":"loopwatch.signal.v1","id":"14c3f61e28209b1c3c4b286ba254f5b8","occurrence":1,"severity":"warn","time_unix_nano":7,"trace_id":"00000000000000000000000000000001","run_key":"r","service_name":"svc","agent_name":null,"profile":"nudge","action":"warn","pattern":"alternating_calls","tool_names":["search","fetch_url"],"count":3,"window":10,"fingerprints":["0123456789abcdef","fedcba9876543210"],"span_ids":["0000000000000001","0000000000000002"],"first_span_id":"0000000000000001","message":"m"}"#;
        assert_eq!(json, wire);
        assert_eq!(serde_json::from_str::<Signal>(wire).expect("reads"), signal);
    }

    #[test]
    fn signal_id_separates_every_input() {
        let base = signal_id("run", "stop", "cycle", &[], 1);
        assert_ne!(base, signal_id("run", "stop", "cycle", &[], 2));
        assert_ne!(base, signal_id("run", "nudge", "cycle", &[], 1));
        assert_ne!(base, signal_id("run", "stop", "repeated_call", &[], 1));
        assert_ne!(base, signal_id("run2", "stop", "cycle", &[], 1));
        assert_ne!(
            signal_id("ab", "c", "p", &[], 1),
            signal_id("a", "bc", "p", &[], 1)
        );
        // two loops of one pattern in one run, each at occurrence 1
        assert_ne!(
            signal_id("run", "stop", "cycle", &[[1; 32]], 1),
            signal_id("run", "stop", "cycle", &[[2; 32]], 1)
        );
    }
}
