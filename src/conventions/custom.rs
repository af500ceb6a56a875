//! User mappings for conventions loopwatch does not ship (`[[conventions.custom]]`).
//!
//! A mapping matches spans (every condition given must hold: span-name glob, attribute
//! present, attribute equal to a string) and says where the tool name, arguments, result,
//! error and call id come from: an attribute key (`"acme.tool.input"`) or an event name
//! plus an attribute key on that event (`{ event = "acme.input", attribute = "body" }`).
//! The tool name defaults to the span name. Mappings are tried in order, before the
//! built-in conventions, so a user's mapping wins for their framework's spans.
//!
//! Validated at start-up ([`ConventionsConfig::validate`]): a mapping without a `name`,
//! without any match condition (it would claim every span), or that can never match (an
//! empty glob or attribute key, `equals` without `attribute`) is an error naming it.

use serde::{Deserialize, Serialize};

use super::{agent_name, call_status, payload_from_any_value};
use crate::conventions::event::{
    CallStatus, EventKind, ExtractedEvent, Payload, SplitSpan, ToolCall,
};
use crate::otlp::view::{attr, AnyValueView, SpanView};

/// Convention label on events read by a custom mapping.
pub const CONVENTION: &str = "custom";

/// `[conventions]`
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConventionsConfig {
    /// `[[conventions.custom]]`: user mappings, tried in order before the built-ins.
    pub custom: Vec<CustomConvention>,
}

/// One `[[conventions.custom]]` mapping.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CustomConvention {
    /// Name used in errors and logs.
    pub name: String,
    /// Which spans are tool calls.
    #[serde(rename = "match")]
    pub matches: SpanMatch,
    /// Tool name source; the span name when unset.
    pub tool_name: Option<Source>,
    pub arguments: Option<Source>,
    pub result: Option<Source>,
    /// Error message source: when present and non-empty the call is an error.
    pub error: Option<Source>,
    pub call_id: Option<Source>,
}

/// Conditions a span must all meet.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SpanMatch {
    /// Glob over the span name: `*` any run of characters, `?` one character.
    pub span_name: Option<String>,
    /// Attribute that must be present.
    pub attribute: Option<String>,
    /// ... and, when set, equal to this string.
    pub equals: Option<String>,
}

/// Where a value comes from: a span attribute, or an attribute of a span event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Source {
    /// A span attribute key.
    Attribute(String),
    /// An attribute of the first span event with this name.
    Event { event: String, attribute: String },
}

impl ConventionsConfig {
    /// Checks every mapping; the error is (config key, reason).
    pub fn validate(&self) -> Result<(), (String, String)> {
        for (i, c) in self.custom.iter().enumerate() {
            let key = format!("conventions.custom[{i}]");
            let named = if c.name.is_empty() {
                return Err((key, "`name` is required".into()));
            } else {
                format!("{key} ({})", c.name)
            };
            let m = &c.matches;
            if m.span_name.is_none() && m.attribute.is_none() {
                return Err((
                    named,
                    "`match` needs `span_name` or `attribute` (it would claim every span)".into(),
                ));
            }
            if m.span_name.as_deref() == Some("") {
                return Err((
                    named,
                    "`match.span_name` is empty: it can never match".into(),
                ));
            }
            if m.attribute.as_deref() == Some("") {
                return Err((
                    named,
                    "`match.attribute` is empty: it can never match".into(),
                ));
            }
            if m.equals.is_some() && m.attribute.is_none() {
                return Err((named, "`match.equals` needs `match.attribute`".into()));
            }
            for (field, source) in [
                ("tool_name", &c.tool_name),
                ("arguments", &c.arguments),
                ("result", &c.result),
                ("error", &c.error),
                ("call_id", &c.call_id),
            ] {
                let empty = match source {
                    Some(Source::Attribute(a)) => a.is_empty(),
                    Some(Source::Event { event, attribute }) => {
                        event.is_empty() || attribute.is_empty()
                    }
                    None => false,
                };
                if empty {
                    return Err((format!("{named}.{field}"), "empty key".into()));
                }
            }
        }
        Ok(())
    }
}

/// The tool call the first matching mapping reads from `span`; `None` when none matches
/// or the tool name is missing.
pub fn extract(mappings: &[CustomConvention], span: &SpanView) -> Option<ExtractedEvent> {
    let mapping = mappings.iter().find(|m| matches(&m.matches, span))?;
    let tool_name = match &mapping.tool_name {
        Some(source) => text(span, source)?,
        None => span.name.as_ref().to_owned(),
    };
    if tool_name.is_empty() {
        return None;
    }
    let error = mapping
        .error
        .as_ref()
        .and_then(|s| text(span, s))
        .filter(|e| !e.is_empty());
    Some(ExtractedEvent {
        kind: EventKind::ToolCall(ToolCall {
            tool_name,
            call_id: mapping
                .call_id
                .as_ref()
                .and_then(|s| text(span, s))
                .filter(|s| !s.is_empty()),
            arguments: mapping.arguments.as_ref().and_then(|s| payload(span, s)),
            result: mapping.result.as_ref().and_then(|s| payload(span, s)),
            status: match error {
                Some(message) => CallStatus::Error { message },
                None => call_status(span),
            },
            split: SplitSpan::Whole,
        }),
        agent_name: agent_name(span),
        convention: CONVENTION,
    })
}

fn matches(m: &SpanMatch, span: &SpanView) -> bool {
    if let Some(glob) = &m.span_name {
        if !glob_match(glob.as_bytes(), span.name.as_bytes()) {
            return false;
        }
    }
    if let Some(key) = &m.attribute {
        let Some(value) = attr(&span.attributes, key) else {
            return false;
        };
        if let Some(want) = &m.equals {
            let have = payload_from_any_value(value);
            if have != Some(Payload::Text(want.clone())) {
                return false;
            }
        }
    }
    true
}

/// `*` matches any run of bytes, `?` one byte; everything else literally.
fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && (pattern[p] == b'?' || pattern[p] == text[t]) {
            p += 1;
            t += 1;
        } else if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, t));
            p += 1;
        } else if let Some((sp, st)) = star {
            p = sp + 1;
            t = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

fn value<'a>(span: &'a SpanView<'a>, source: &Source) -> Option<&'a AnyValueView<'a>> {
    match source {
        Source::Attribute(key) => attr(&span.attributes, key),
        Source::Event { event, attribute } => span
            .events
            .iter()
            .filter(|e| &e.name == event)
            .find_map(|e| attr(&e.attributes, attribute)),
    }
}

fn payload(span: &SpanView, source: &Source) -> Option<Payload> {
    value(span, source).and_then(payload_from_any_value)
}

fn text(span: &SpanView, source: &Source) -> Option<String> {
    match payload(span, source)? {
        Payload::Text(s) => Some(s),
        Payload::Json(j) => Some(j.to_string()),
        Payload::Bytes(b) => String::from_utf8(b).ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conventions::test_support::*;

    fn acme() -> CustomConvention {
        toml::from_str(
            r#"
            name = "acme"
            match = { span_name = "acme.tool.*", attribute = "acme.kind", equals = "tool" }
            tool_name = "acme.tool"
            arguments = { event = "acme.input", attribute = "body" }
            result = "acme.output"
            error = "acme.error"
            call_id = "acme.call"
            "#,
        )
        .expect("a mapping")
    }

    #[test]
    fn made_up_framework_spans() {
        let mut sp = span(
            "acme.tool.run",
            vec![
                kvs("acme.kind", "tool"),
                kvs("acme.tool", "fetch"),
                kvs("acme.output", "404"),
                kvs("acme.call", "c-1"),
            ],
        );
        sp.events = vec![event("acme.input", vec![kvs("body", r#"{"url":"a"}"#)])];
        let ev = extract(&[acme()], &SpanView::from(&sp)).expect("matched");
        assert_eq!(ev.convention, "custom");
        let EventKind::ToolCall(c) = ev.kind else {
            panic!("not a tool call")
        };
        assert_eq!(c.tool_name, "fetch");
        assert_eq!(c.arguments, Some(Payload::Text(r#"{"url":"a"}"#.into())));
        assert_eq!(c.result, Some(Payload::Text("404".into())));
        assert_eq!(c.call_id.as_deref(), Some("c-1"));
        assert_eq!(c.status, CallStatus::Ok);
        // The error attribute makes it an error.
        sp.attributes.push(kvs("acme.error", "timeout"));
        let EventKind::ToolCall(c) = extract(&[acme()], &SpanView::from(&sp)).unwrap().kind else {
            panic!("not a tool call")
        };
        assert_eq!(
            c.status,
            CallStatus::Error {
                message: "timeout".into()
            }
        );
        // Any condition failing: no match.
        let mut other = sp.clone();
        other.name = "acme.task.run".into();
        assert_eq!(extract(&[acme()], &SpanView::from(&other)), None);
        let mut other = sp.clone();
        other.attributes[0] = kvs("acme.kind", "task");
        assert_eq!(extract(&[acme()], &SpanView::from(&other)), None);
    }

    #[test]
    fn globs() {
        for (p, t, want) in [
            ("acme.*", "acme.tool", true),
            ("*.tool", "acme.tool", true),
            ("a?me*", "acme", true),
            ("acme", "acme.tool", false),
            ("*x*y", "axbxcy", true),
            ("*x*y", "axbxc", false),
        ] {
            assert_eq!(glob_match(p.as_bytes(), t.as_bytes()), want, "{p} {t}");
        }
    }

    #[test]
    fn mappings_that_can_never_match_are_errors_naming_them() {
        let check = |c: CustomConvention| {
            ConventionsConfig { custom: vec![c] }
                .validate()
                .err()
                .map(|(k, r)| format!("{k}: {r}"))
        };
        assert_eq!(check(acme()), None);
        let mut c = acme();
        c.matches = SpanMatch::default();
        assert_eq!(
            check(c).as_deref(),
            Some("conventions.custom[0] (acme): `match` needs `span_name` or `attribute` (it would claim every span)")
        );
        let mut c = acme();
        c.matches.attribute = None;
        assert!(check(c)
            .unwrap()
            .contains("`match.equals` needs `match.attribute`"));
        let mut c = acme();
        c.matches.span_name = Some(String::new());
        assert!(check(c).unwrap().contains("can never match"));
        let mut c = acme();
        c.name = String::new();
        assert!(check(c).unwrap().contains("`name` is required"));
        let mut c = acme();
        c.result = Some(Source::Attribute(String::new()));
        assert_eq!(
            check(c).as_deref(),
            Some("conventions.custom[0] (acme).result: empty key")
        );
    }
}
