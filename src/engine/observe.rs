//! The detector's view of an extracted event: fingerprints, and for a tool call the forms
//! [`crate::compare`] compares and the traits it reads ([`CallTraits`]).
//!
//! The call fingerprint is the canonical one ([`crate::fingerprint`]; exported, unchanged
//! unless `arguments_volatile_patterns` or `shell_normalise` apply). The result fingerprint
//! is the comparison one: a plain-text result or an error message is fingerprinted after
//! its noise and the words of the call's arguments are taken out, when any were; a JSON
//! result as before (`result_volatile_keys`).

use std::borrow::Cow;

use super::Engine;
use crate::compare::{signature, ArgumentsView, CommandEffect};
use crate::conventions::event::{
    CallStatus, EventKind, ModelResponse, Payload, SplitSpan, ToolCall,
};
use crate::detector::tools::FingerprintTreatment;
use crate::detector::{CallTraits, Observation};
use crate::fingerprint::{text_fingerprint, Fingerprint, RecentFingerprints};
use crate::otlp::view::SpanView;

/// Longest compared result kept for `explain`, in characters.
const FORM_CHARS: usize = 600;

/// What `loopwatch explain` shows of a call beside its fingerprints: the forms compared.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CallForms {
    /// The command of a shell tool.
    pub command: Option<String>,
    /// `reads`, `writes`, `moves`, or `None` when not classed.
    pub effect: Option<&'static str>,
    /// The result (or error message) as compared, cut to [`FORM_CHARS`] characters;
    /// `None` when not captured or when JSON (compared as canonical JSON).
    pub compared_result: Option<String>,
    /// The compared form differs from the result as recorded.
    pub normalised: bool,
}

/// True for a text that holds a JSON object or array (compared as canonical JSON); text
/// that only starts like one (`[File: a.java (3 lines total)]`) is plain text.
fn is_json_container(text: &str) -> bool {
    crate::fingerprint::opens_container(text)
        && serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok()
}

/// True for a successful call whose result is a text holding a JSON object or array
/// ([`is_json_container`]): compared as canonical JSON, not as plain text.
pub(super) fn result_is_json(status: &CallStatus, result: Option<&Payload>) -> bool {
    matches!((status, result), (CallStatus::Ok, Some(Payload::Text(text))) if is_json_container(text))
}

/// The arguments' half of the traits read from `view`.
pub(super) fn argument_traits(view: &ArgumentsView) -> CallTraits {
    let mut traits = CallTraits::default();
    traits.set(
        CallTraits::WRITES,
        view.effect == Some(CommandEffect::Writes),
    );
    traits.set(CallTraits::MOVES, view.effect == Some(CommandEffect::Moves));
    if let Some(near) = view.near {
        traits.set_near(near);
    }
    traits.set_shape(view.shape);
    traits
}

fn effect_of(traits: CallTraits) -> Option<CommandEffect> {
    if traits.has(CallTraits::WRITES) {
        Some(CommandEffect::Writes)
    } else if traits.has(CallTraits::MOVES) {
        Some(CommandEffect::Moves)
    } else {
        None
    }
}

impl Engine {
    /// The detector's view of an extracted event, and (with `forms`) what explain shows of
    /// a tool call; a tool call's fingerprints are taken from `recent` when this request
    /// fingerprinted the same tool and text already.
    pub(super) fn observation(
        &self,
        kind: &EventKind,
        span: &SpanView,
        recent: &RecentFingerprints,
        forms: bool,
    ) -> (Observation, Option<CallForms>) {
        match kind {
            EventKind::ToolCall(call) => {
                let mut kept = forms.then(CallForms::default);
                let observation = self.tool_call_observation(call, span, recent, kept.as_mut());
                (observation, kept)
            }
            EventKind::ModelResponse(ModelResponse::Text(text)) => (
                Observation::TextResponse {
                    text_fingerprint: text_fingerprint(text),
                },
                None,
            ),
            EventKind::ModelResponse(ModelResponse::ToolCalls) => {
                (Observation::ToolCallResponse, None)
            }
        }
    }

    fn tool_call_observation(
        &self,
        call: &ToolCall,
        span: &SpanView,
        recent: &RecentFingerprints,
        mut forms: Option<&mut CallForms>,
    ) -> Observation {
        let rules = self.tool_fingerprints.load();
        let rule = rules.treatment(&call.tool_name);
        let compare = rule.map(|r| &r.compare);
        let (tool_name, class) = self.names.get_classed(&call.tool_name);
        let read_arguments = || {
            self.comparer.arguments_of_class(
                &call.tool_name,
                class,
                call.arguments.as_ref(),
                compare,
            )
        };
        let remembered = match &call.arguments {
            Some(Payload::Text(text)) if forms.is_none() => recent.arguments(&call.tool_name, text),
            _ => None,
        };
        let mut view: Option<ArgumentsView> = None;
        let (call_fingerprint, argument_traits) = match remembered {
            Some((fingerprint, bits)) => (Some(fingerprint), CallTraits::unpack(bits)),
            None => {
                let read = read_arguments();
                let traits = argument_traits(&read);
                view = Some(read);
                let fingerprint = self.call_fingerprint(&call.tool_name, call.arguments.as_ref());
                (fingerprint, traits)
            }
        };
        if let (Some(forms), Some(view)) = (forms.as_deref_mut(), &view) {
            forms.command = view.command.clone();
            forms.effect = view.effect.map(|e| match e {
                CommandEffect::Reads => "reads",
                CommandEffect::Writes => "writes",
                CommandEffect::Moves => "moves",
            });
        }
        let effect = effect_of(argument_traits);
        let transient = match &call.status {
            CallStatus::Error { message } => rule
                .and_then(|r| r.transient_errors.as_ref())
                .is_some_and(|r| r.is_match(message)),
            CallStatus::Ok => false,
        };
        let remembered = match (&call.status, &call.result, &forms) {
            (CallStatus::Ok, Some(Payload::Text(text)), None) => {
                recent.result(&call.tool_name, text, &call_fingerprint.unwrap_or([0; 32]))
            }
            _ => None,
        };
        let (result_fingerprint, result_traits) = if transient {
            // A transient error (rate limit, timeout) counts toward no pattern.
            let traits = CallTraits::with_flags(CallTraits::ERROR | CallTraits::TRANSIENT);
            (
                Some(transient_fingerprint(span.trace_id, span.span_id)),
                traits,
            )
        } else if let Some((fingerprint, bits)) = remembered {
            (Some(fingerprint), CallTraits::unpack(bits))
        } else {
            // A JSON result is told apart and fingerprinted in one parse where the
            // one-pass path reads it.
            let json_fingerprint = match (&call.status, &call.result) {
                (CallStatus::Ok, Some(Payload::Text(text))) => self
                    .fingerprinter
                    .json_result_fingerprint(text, rule.map(|r| &r.result_volatile_keys))
                    .map(|fingerprint| (fingerprint, text.as_str())),
                _ => None,
            };
            let json =
                json_fingerprint.is_some() || result_is_json(&call.status, call.result.as_ref());
            let needs_words = match (&call.status, &call.result) {
                (CallStatus::Error { .. }, _) => true,
                (CallStatus::Ok, Some(Payload::Text(_))) => !json,
                _ => false,
            };
            // The argument words are read only for what masks them: a plain-text result
            // or an error message.
            let words = if needs_words {
                self.comparer.argument_words(call.arguments.as_ref())
            } else {
                Vec::new()
            };
            if let Some(forms) = forms {
                // explain: the text the result is compared as (computed again, off the
                // span path).
                let recorded = match (&call.status, &call.result, json) {
                    (CallStatus::Error { message }, _, _) => Some(message.as_str()),
                    (CallStatus::Ok, Some(Payload::Text(text)), false) => Some(text.as_str()),
                    _ => None,
                };
                if let Some(recorded) = recorded {
                    let text = self
                        .comparer
                        .result(
                            recorded,
                            &words,
                            rule.map(|r| &r.compare),
                            matches!(call.status, CallStatus::Error { .. }),
                        )
                        .text;
                    forms.compared_result = Some(text.chars().take(FORM_CHARS).collect());
                    forms.normalised = text != recorded;
                }
            }
            match json_fingerprint {
                Some((fingerprint, text)) => self.json_result(text, Some(fingerprint), effect),
                None => self.compared_result(
                    &call.status,
                    call.result.as_ref(),
                    json,
                    &words,
                    rule,
                    effect,
                ),
            }
        };
        match result_fingerprint {
            // The result span of a call traced on two sibling spans: no call.
            Some(result_fingerprint) if call.split == SplitSpan::Result => {
                Observation::ToolResult {
                    tool_name,
                    result_fingerprint,
                    traits: result_traits,
                }
            }
            _ => Observation::ToolCall {
                tool_name,
                call_fingerprint,
                result_fingerprint,
                traits: argument_traits.with_result_of(result_traits),
            },
        }
    }

    /// The comparison fingerprint of a result (or error message) and the result's half of
    /// the traits. `json` is [`result_is_json`] of the result (read once by the caller);
    /// `words` are the call's argument words to mask; `effect` the call's.
    pub(super) fn compared_result(
        &self,
        status: &CallStatus,
        result: Option<&Payload>,
        json: bool,
        words: &[String],
        rule: Option<&FingerprintTreatment>,
        effect: Option<CommandEffect>,
    ) -> (Option<Fingerprint>, CallTraits) {
        let compare = rule.map(|r| &r.compare);
        let plain = |status: &CallStatus, result: Option<&Payload>| match rule {
            Some(rule) => self.fingerprinter.result_fingerprint_with(
                status,
                result,
                &rule.result_volatile_keys,
            ),
            None => self.fingerprinter.result_fingerprint(status, result),
        };
        let mut traits = CallTraits::default();
        match (status, result) {
            (CallStatus::Error { message }, _) => {
                traits.set(CallTraits::ERROR, true);
                let form = self.comparer.result(message, words, compare, true);
                traits.set(CallTraits::NOISE, form.noise);
                traits.set(
                    CallTraits::OUTCOME,
                    self.comparer.is_outcome(&form.text, true, effect),
                );
                let fingerprint = match form.text {
                    Cow::Borrowed(_) => plain(status, result),
                    Cow::Owned(text) => plain(&CallStatus::Error { message: text }, None),
                };
                (fingerprint, traits)
            }
            (CallStatus::Ok, Some(Payload::Text(text))) if json => {
                self.json_result(text, plain(status, result), effect)
            }
            (CallStatus::Ok, Some(Payload::Text(text))) => {
                let form = self.comparer.result(text, words, compare, false);
                traits.set(CallTraits::NOISE, form.noise);
                traits.set(
                    CallTraits::OUTCOME,
                    self.comparer.is_outcome(&form.text, false, effect),
                );
                traits.set_growth(signature::growth(&form.text));
                let fingerprint = match form.text {
                    Cow::Borrowed(_) => plain(status, result),
                    Cow::Owned(text) => plain(status, Some(&Payload::Text(text))),
                };
                (fingerprint, traits)
            }
            (CallStatus::Ok, Some(Payload::Json(value))) => {
                let outcome = match value {
                    serde_json::Value::String(s) => self.comparer.is_outcome(s, false, effect),
                    other => self.comparer.is_value_outcome(other, effect),
                };
                traits.set(CallTraits::OUTCOME, outcome);
                (plain(status, result), traits)
            }
            (CallStatus::Ok, result) => (plain(status, result), traits),
        }
    }

    /// [`Engine::compared_result`] of a successful call whose result is `text`, a JSON
    /// object or array, fingerprinted as `fingerprint`.
    fn json_result(
        &self,
        text: &str,
        fingerprint: Option<Fingerprint>,
        effect: Option<CommandEffect>,
    ) -> (Option<Fingerprint>, CallTraits) {
        let traits = CallTraits::with_flags(if self.comparer.is_json_outcome(text, effect) {
            CallTraits::OUTCOME
        } else {
            0
        });
        (fingerprint, traits)
    }

    /// The call fingerprint of a call to `tool_name` with `arguments` as a span records
    /// them (`None`: not captured): the tool's own volatile keys and
    /// `arguments_volatile_patterns` apply, with `shell_normalise` a shell tool's command is
    /// in normal form, and Python literals read as JSON (`extract_with_recorded_arguments`).
    /// `None` when the arguments are missing and `match_tool_name_without_arguments` is off
    /// (the call is then invisible to the patterns). Shared by the span path, message parts
    /// and the pre-execution check.
    pub fn call_fingerprint(
        &self,
        tool_name: &str,
        arguments: Option<&Payload>,
    ) -> Option<Fingerprint> {
        let Some(arguments) = arguments else {
            return self.options.match_tool_name_without_arguments.then(|| {
                self.fingerprinter
                    .call_fingerprint(tool_name, &Payload::Json(serde_json::Value::Null))
            });
        };
        let rules = self.tool_fingerprints.load();
        let rule = rules.treatment(tool_name);
        let changed = match arguments {
            Payload::Text(text) => {
                match self
                    .comparer
                    .argument_text(tool_name, text, rule.map(|r| &r.compare))
                {
                    Cow::Owned(text) => Some(Payload::Text(text)),
                    Cow::Borrowed(_) => None,
                }
            }
            _ => None,
        };
        Some(self.fingerprinter.call_fingerprint_normalized(
            tool_name,
            changed.as_ref().unwrap_or(arguments),
            rule.map(|rule| &rule.volatile_keys),
            crate::conventions::wrappers::python_literal_arguments,
        ))
    }

    /// Keeps the compared forms of every call from now on, for [`Engine::forms_of`]
    /// (`loopwatch explain`; costs a map entry per call).
    pub fn keep_forms(&mut self) {
        self.forms = Some(Default::default());
    }

    /// The compared forms of the call with event span_id `span_id`, when kept.
    pub fn forms_of(&self, span_id: &[u8]) -> Option<CallForms> {
        let forms = self.forms.as_ref()?;
        let forms = forms.lock().unwrap_or_else(|e| e.into_inner());
        forms.get(span_id).cloned()
    }
}

/// Hands the texts of `kind`, a tool call, with the fingerprints and traits `observation`
/// took from them, to `recent` (moved, not copied): arguments given as text, and the text
/// result of a call that succeeded (an error's fingerprint may be a transient one, unique
/// to its span, and is never remembered).
pub(super) fn remember(
    recent: &mut RecentFingerprints,
    kind: EventKind,
    observation: &Observation,
) {
    let (
        EventKind::ToolCall(call),
        Observation::ToolCall {
            tool_name,
            call_fingerprint,
            result_fingerprint,
            traits,
        },
    ) = (kind, observation)
    else {
        return;
    };
    let arguments_half = CallTraits::default().with_arguments_of(*traits).pack();
    if let (Some(Payload::Text(text)), Some(fingerprint)) = (call.arguments, call_fingerprint) {
        recent.keep_arguments(tool_name, text, (*fingerprint, arguments_half));
    }
    if let (CallStatus::Ok, Some(Payload::Text(text)), Some(fingerprint)) =
        (call.status, call.result, result_fingerprint)
    {
        let context = call_fingerprint.unwrap_or([0; 32]);
        recent.keep_result(tool_name, text, context, (*fingerprint, traits.pack()));
    }
}

/// The result fingerprint of a transient error: unique to its span, so it never equals
/// another result (SHA-256 of a tag, the trace_id and the span_id).
fn transient_fingerprint(trace_id: &[u8], span_id: &[u8]) -> Fingerprint {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    hasher.update(b"transient\0");
    hasher.update(trace_id);
    hasher.update([0u8]);
    hasher.update(span_id);
    hasher.finalize().into()
}
