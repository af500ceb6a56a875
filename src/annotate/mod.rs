//! `loop.*` attributes and a `loop.detected` span event on the span that completes a
//! detection (DESIGN §5).
//!
//! Only attributes and one event are added (an existing attribute with one of loopwatch's
//! own keys, e.g. from a second loopwatch in the path, is replaced, and so is an existing
//! `loop.detected` event; other `loop.*` keys and other events are left alone); nothing
//! else in the span changes, and no argument or result content is ever copied into
//! attributes.

pub mod synthetic;
pub mod wire;

use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue, ArrayValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::span::Event;
use std::borrow::Cow;
use std::fmt::{self, Display};
use std::sync::Arc;

use crate::annotate::wire::{value as wire_value, EncodedAttributes};
use crate::detector::{Action, Detection, Pattern};
use crate::fingerprint::Fingerprint;
use crate::otlp::{hex_id, Span};
use crate::registry::RunDetection;

/// One sentence explaining a detection, e.g. "read_file was called 5 times with the same
/// arguments in the last 10 tool calls".
pub fn reason(d: &RunDetection) -> String {
    reason_of(&d.detection)
}

/// The text a signal of `action` carries for `det` (a signal's `message`, the pre-execution
/// check's `message`): for `warn` a nudge the agent runtime can show the model, for `kill`
/// and `require_approval` what loopwatch did and why. Quotes [`reason_of`].
pub fn message(det: &Detection, action: Action) -> String {
    let reason = reason_of(det);
    let tool = det
        .tool_names
        .first()
        .map_or("the same tool", |t| t.as_ref());
    match action {
        Action::Kill => format!("loopwatch stopped this run: {reason}."),
        Action::RequireApproval => {
            format!("loopwatch paused this run until someone approves it: {reason}.")
        }
        Action::Warn if det.pattern == Pattern::DelegationCycle => format!(
            "You seem to be stuck in a loop: {reason}. Do not hand the task back again; \
             finish it with what you have, or stop and report what is blocking you."
        ),
        Action::Warn => format!(
            "You seem to be stuck in a loop: {reason}. Do not call {tool} with the same arguments again; \
             try a different approach, or stop and report what is blocking you."
        ),
    }
}

/// [`reason`] of a bare detection (no run context needed).
pub fn reason_of(det: &Detection) -> String {
    let tools = &det.tool_names;
    let first = tools.first().map_or("a tool", |t| &**t);
    let sentence = match det.pattern {
        Pattern::RepeatedCall => format!(
            "{first} was called {} times with the same arguments in the last {} tool calls",
            det.count, det.window
        ),
        Pattern::RepeatedResult => format!(
            "{first} returned the same result {} times in a row for the same arguments",
            det.count
        ),
        Pattern::RepeatedOutcome => format!(
            "{} returned no new outcome in {} calls in a row with different arguments (the same one each time, or a few by turns, each at least twice)",
            joined(tools, ", "),
            det.count
        ),
        Pattern::NearRepeat => format!(
            "{first} was called {} times in a row with near-identical arguments and the same result",
            det.count
        ),
        Pattern::AlternatingCalls => format!(
            "{} and {} alternated {} times with the same arguments",
            first,
            tools.get(1).map_or("another tool", |t| &**t),
            det.count
        ),
        Pattern::Cycle => format!(
            "the call sequence {} repeated {} times with the same arguments",
            joined(tools, " → "),
            det.count
        ),
        Pattern::RepeatedText => format!(
            "the model gave the same text response {} times in a row",
            det.count
        ),
        Pattern::BudgetExceeded => match &det.budget {
            Some(exceeded) => exceeded.reason(),
            None => "a run budget was exceeded".to_string(),
        },
        Pattern::DelegationCycle => format!(
            "the agents {} → {first} handed the run around the same cycle {} times",
            joined(tools, " → "),
            det.count
        ),
    };
    match (det.severity, det.evidence) {
        (crate::detector::Severity::Info, _) => {
            format!("{sentence}, but the results changed (progress, not a loop)")
        }
        (_, crate::detector::Evidence::Noise) => format!(
            "{sentence} (results compared without their volatile noise: counters, times, ids, addresses)"
        ),
        (_, crate::detector::Evidence::Growth) => format!(
            "{sentence} (the results only grew by the same block at each call: no progress)"
        ),
        _ => sentence,
    }
}

/// `names` with `separator` between them, as `join` writes them, for a `format!` argument
/// or a log field without building the joined string.
pub(crate) fn joined<'a>(names: &'a [Arc<str>], separator: &'a str) -> impl Display + 'a {
    struct Joined<'a>(&'a [Arc<str>], &'a str);
    impl Display for Joined<'_> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            for (i, name) in self.0.iter().enumerate() {
                if i > 0 {
                    f.write_str(self.1)?;
                }
                f.write_str(name)?;
            }
            Ok(())
        }
    }
    Joined(names, separator)
}

/// Picks the detection that writes the attributes: the most severe, the first profile on ties.
pub fn most_severe<'a>(detections: &[&'a RunDetection]) -> Option<&'a RunDetection> {
    detections.iter().copied().max_by(|a, b| {
        a.detection
            .severity
            .cmp(&b.detection.severity)
            .then(b.profile_index.cmp(&a.profile_index))
    })
}

/// Name of the span event loopwatch adds beside the attributes (and of its synthetic
/// spans, [`crate::annotate::synthetic`]): trace UIs that hide attributes show events on the
/// timeline.
pub const EVENT_NAME: &str = "loop.detected";

/// Writes the `loop.*` attributes of `detections` (all completed by this span) on `span`,
/// and a span event [`EVENT_NAME`] with the same attributes at the span's end time (the
/// detection's time, except on a copy of the completing span, same span_id, that carries
/// another end time; the wire path writes the same). An existing `loop.detected` event is
/// replaced, never doubled.
/// `short_fingerprint` renders a fingerprint in its external short form (16 hex chars of
/// the keyed HMAC). Does nothing when `detections` is empty.
pub fn annotate_span(
    span: &mut Span,
    detections: &[&RunDetection],
    short_fingerprint: &dyn Fn(&Fingerprint) -> String,
) {
    let Some((attributes, _detection_time)) = loop_attributes(detections, short_fingerprint) else {
        return;
    };
    let time_unix_nano = span.end_time_unix_nano;
    span.attributes
        .retain(|kv| !attributes.iter().any(|new| new.key == kv.key));
    span.events.retain(|e| e.name != EVENT_NAME);
    span.events.push(Event {
        time_unix_nano,
        name: EVENT_NAME.to_string(),
        attributes: attributes.clone(),
        dropped_attributes_count: 0,
    });
    span.attributes.extend(attributes);
}

/// The `loop.*` attributes describing `detections` (all completed by one span; the most
/// severe writes the single-valued keys, `loop.profiles` lists every profile), with the
/// detection time (end of the completing span, ns since the Unix epoch). `None` when
/// `detections` is empty.
pub fn loop_attributes(
    detections: &[&RunDetection],
    short_fingerprint: &dyn Fn(&Fingerprint) -> String,
) -> Option<(Vec<KeyValue>, u64)> {
    let (values, time) = loop_values(detections, short_fingerprint)?;
    let attributes = values
        .into_iter()
        .map(|(key, value)| KeyValue {
            key: key.to_string(),
            value: Some(AnyValue {
                value: Some(value.into_otlp()),
            }),
            ..KeyValue::default()
        })
        .collect();
    Some((attributes, time))
}

/// [`loop_attributes`] as the protobuf encoding of each `KeyValue` (the bytes prost writes
/// for it), written directly without building the `KeyValue`s, for the wire path.
pub fn encoded_loop_attributes(
    detections: &[&RunDetection],
    short_fingerprint: &dyn Fn(&Fingerprint) -> String,
) -> Option<(EncodedAttributes, u64)> {
    let (values, time) = loop_values(detections, short_fingerprint)?;
    let mut encoded = EncodedAttributes::with_capacity(values.len(), 512);
    for (key, value) in &values {
        encoded.push(key, |out| value.encode_any_value(out));
    }
    Some((encoded, time))
}

/// The value of one `loop.*` attribute (an OTLP `AnyValue` of one of these kinds); texts
/// borrow from the detections where they can (the wire path encodes them and drops them).
enum LoopValue<'a> {
    Bool(bool),
    Int(i64),
    Str(Cow<'a, str>),
    Strings(Vec<Cow<'a, str>>),
}

/// `loop.*` keys and values of [`loop_attributes`], in the order they are written.
type LoopValues<'a> = [(&'static str, LoopValue<'a>); 12];

fn loop_values<'a>(
    detections: &[&'a RunDetection],
    short_fingerprint: &dyn Fn(&Fingerprint) -> String,
) -> Option<(LoopValues<'a>, u64)> {
    let main = most_severe(detections)?;
    let det = &main.detection;
    let mut profiles: Vec<Cow<'a, str>> = Vec::new();
    for d in detections {
        if !profiles.iter().any(|p| *p == d.profile.name) {
            profiles.push(Cow::Borrowed(&d.profile.name));
        }
    }
    let first_span_id = main
        .span_ids
        .first()
        .map_or_else(|| hex_id(&main.span_id), |id| hex_id(id));
    let values = [
        ("loop.detected", LoopValue::Bool(true)),
        ("loop.pattern", LoopValue::Str(det.pattern.as_str().into())),
        ("loop.count", LoopValue::Int(det.count as i64)),
        ("loop.window", LoopValue::Int(det.window as i64)),
        (
            "loop.tool_names",
            LoopValue::Strings(det.tool_names.iter().map(|t| Cow::Borrowed(&**t)).collect()),
        ),
        (
            "loop.fingerprints",
            LoopValue::Strings(
                det.fingerprints
                    .iter()
                    .map(|fp| Cow::Owned(short_fingerprint(fp)))
                    .collect(),
            ),
        ),
        ("loop.first_span_id", LoopValue::Str(first_span_id.into())),
        (
            "loop.severity",
            LoopValue::Str(det.severity.as_str().into()),
        ),
        (
            "loop.profile",
            LoopValue::Str(Cow::Borrowed(&main.profile.name)),
        ),
        (
            "loop.occurrence",
            LoopValue::Int(i64::from(main.occurrence)),
        ),
        ("loop.reason", LoopValue::Str(reason(main).into())),
        ("loop.profiles", LoopValue::Strings(profiles)),
    ];
    Some((values, main.time_unix_nano))
}

impl LoopValue<'_> {
    fn into_otlp(self) -> Value {
        match self {
            LoopValue::Bool(b) => Value::BoolValue(b),
            LoopValue::Int(i) => Value::IntValue(i),
            LoopValue::Str(s) => Value::StringValue(s.into_owned()),
            LoopValue::Strings(items) => Value::ArrayValue(ArrayValue {
                values: items
                    .into_iter()
                    .map(|s| AnyValue {
                        value: Some(Value::StringValue(s.into_owned())),
                    })
                    .collect(),
            }),
        }
    }

    /// Writes the `AnyValue` message body prost writes for [`LoopValue::into_otlp`].
    fn encode_any_value(&self, out: &mut Vec<u8>) {
        match self {
            LoopValue::Bool(b) => wire_value::put_bool(*b, out),
            LoopValue::Int(i) => wire_value::put_int(*i, out),
            LoopValue::Str(s) => wire_value::put_string(s, out),
            LoopValue::Strings(items) => wire_value::put_string_array(items, out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detector::{Detection, ProfileSettings, Severity};
    use std::sync::Arc;

    #[test]
    fn joined_writes_what_join_makes() {
        for names in [&[][..], &["a"], &["read_file", "search", "a"]] {
            let tools: Vec<Arc<str>> = names.iter().map(|t| Arc::from(*t)).collect();
            for separator in [",", " → "] {
                assert_eq!(joined(&tools, separator).to_string(), names.join(separator));
            }
        }
    }

    fn detection(tool_names: &[&str], count: usize, severity: Severity) -> RunDetection {
        let mut d = RunDetection::sample(Pattern::Cycle, tool_names, severity);
        Arc::make_mut(&mut d.detection).count = count;
        d
    }

    #[test]
    fn encoded_attributes_are_the_bytes_prost_writes() {
        let short = |fp: &Fingerprint| hex::encode(&fp[..8]);
        let long_name = "t".repeat(200);
        let cases = [
            detection(&[], 0, Severity::Info),
            detection(&["a"], 3, Severity::Warn),
            detection(&["read_file", "", &long_name], 1 << 40, Severity::Kill),
        ];
        for (i, d) in cases.iter().enumerate() {
            let pair = [d, &cases[(i + 1) % cases.len()]];
            let (attributes, time) = loop_attributes(&pair, &short).unwrap();
            let (encoded, encoded_time) = encoded_loop_attributes(&pair, &short).unwrap();
            assert_eq!(encoded_time, time);
            assert_eq!(encoded, EncodedAttributes::from_key_values(&attributes));
        }
        assert!(encoded_loop_attributes(&[], &short).is_none());
    }

    #[test]
    fn replaces_its_own_keys_and_keeps_every_other_attribute() {
        let detection = RunDetection {
            profile_index: 0,
            profile: Arc::new(ProfileSettings::nudge()),
            detection: Arc::new(Detection {
                pattern: Pattern::RepeatedCall,
                tool_names: vec![Arc::from("read_file")],
                count: 5,
                window: 10,
                severity: Severity::Warn,
                fingerprints: vec![[7; 32]],
                members: vec![0, 1, 2, 3, 4],
                call: Some(5),
                response: None,
                budget: None,
                evidence: Default::default(),
            }),
            run_key: Arc::from("run"),
            trace_id: [1; 16].as_slice().into(),
            span_id: [2; 8].as_slice().into(),
            span_ids: Arc::new([[3; 8].as_slice().into(), [2; 8].as_slice().into()]),
            time_unix_nano: 1_500,
            occurrence: 1,
            service_name: None,
            agent_name: None,
        };
        let kv = |key: &str, value: Value| KeyValue {
            key: key.into(),
            value: Some(AnyValue { value: Some(value) }),
            ..KeyValue::default()
        };
        let mut span = Span {
            end_time_unix_nano: 1_500,
            attributes: vec![
                kv("loop.iteration", Value::IntValue(4)),
                kv("loop.count", Value::IntValue(99)),
                kv("gen_ai.tool.name", Value::StringValue("read_file".into())),
            ],
            events: vec![
                Event {
                    name: "retry".into(),
                    ..Default::default()
                },
                Event {
                    name: EVENT_NAME.into(),
                    time_unix_nano: 9,
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        annotate_span(&mut span, &[&detection], &|_| "0123456789abcdef".into());
        // A replay annotates the same span again: still one event and one of each key.
        annotate_span(&mut span, &[&detection], &|_| "0123456789abcdef".into());
        let get = |key: &str| {
            let found: Vec<_> = span.attributes.iter().filter(|kv| kv.key == key).collect();
            assert!(found.len() <= 1, "{key} written twice");
            found
                .first()
                .and_then(|kv| kv.value.clone())
                .and_then(|v| v.value)
        };
        assert_eq!(get("loop.iteration"), Some(Value::IntValue(4)));
        assert_eq!(get("loop.count"), Some(Value::IntValue(5)));
        assert_eq!(
            get("gen_ai.tool.name"),
            Some(Value::StringValue("read_file".into()))
        );
        assert_eq!(
            get("loop.first_span_id"),
            Some(Value::StringValue("0303030303030303".into()))
        );
        assert_eq!(span.attributes.len(), 2 + 12);
        let names: Vec<&str> = span.events.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["retry", EVENT_NAME]);
        let event = &span.events[1];
        assert_eq!(event.time_unix_nano, 1_500);
        let loop_keys: Vec<&KeyValue> = span
            .attributes
            .iter()
            .filter(|kv| kv.key.starts_with("loop.") && kv.key != "loop.iteration")
            .collect();
        assert_eq!(event.attributes.iter().collect::<Vec<_>>(), loop_keys);
        // A copy of the completing span (same span_id) sent with another end time: its
        // event sits at its own end.
        let mut copy = Span {
            end_time_unix_nano: 1_700,
            ..Default::default()
        };
        annotate_span(&mut copy, &[&detection], &|_| "0123456789abcdef".into());
        assert_eq!(copy.events[0].time_unix_nano, 1_700);
    }
}
