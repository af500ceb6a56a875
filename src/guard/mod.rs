//! The pre-execution check (`POST /v1/check` on the admin listener, gRPC
//! `loopwatch.v1.Guard/Check` on the OTLP gRPC port): what the detectors would decide if a
//! run made a given call next and it returned what the run's last identical call returned.
//! Read-only: the run's state is copied, never changed ([`Registry::what_if`]).
//!
//! [`Registry::what_if`]: crate::registry::Registry::what_if

pub mod approval;
pub mod grpc;
pub mod http;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::conventions::event::Payload;
use crate::detector::Action;
use crate::engine::Engine;

/// The call an agent is about to make.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckRequest {
    /// Trace id of the run (32 hex characters, any case); the run key when `run_key` is
    /// absent and runs are keyed by trace.
    #[serde(default)]
    pub trace_id: Option<String>,
    /// Run key, when runs are keyed by an attribute (`detection.run_key_attribute`).
    #[serde(default)]
    pub run_key: Option<String>,
    /// `gen_ai.tool.name` of the call.
    pub tool_name: String,
    /// The arguments as `gen_ai.tool.call.arguments` would carry them: a JSON string is read
    /// as the text it holds (JSON text or plain text), any other JSON value as itself.
    /// Absent: a call whose arguments are not known (it matches only with
    /// `detection.match_tool_name_without_arguments`).
    #[serde(default)]
    pub arguments: Option<serde_json::Value>,
}

/// What loopwatch would do about the call: `allow`, `warn`, `deny` (a `kill` profile would
/// fire) or `require_approval` (a `require_approval` profile would fire).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Allow,
    Warn,
    RequireApproval,
    Deny,
}

impl Decision {
    /// The wire name: `"allow"`, `"warn"`, `"require_approval"` or `"deny"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Warn => "warn",
            Decision::RequireApproval => "require_approval",
            Decision::Deny => "deny",
        }
    }

    /// The decision a signal of `action` stands for.
    pub fn of_action(action: Action) -> Decision {
        match action {
            Action::Warn => Decision::Warn,
            Action::Kill => Decision::Deny,
            Action::RequireApproval => Decision::RequireApproval,
        }
    }
}

/// The answer to a [`CheckRequest`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckResponse {
    pub decision: Decision,
    /// The pattern that would fire (`repeated_call`, …); empty for `allow`.
    pub pattern: String,
    /// Repetitions the pattern would count; 0 for `allow`.
    pub count: u32,
    /// The text to show the model, as a signal's `message`; empty for `allow`.
    pub message: String,
    /// The profile that decided; empty for `allow`.
    pub profile: String,
    /// Whether loopwatch holds state for the run.
    pub known_run: bool,
}

impl CheckResponse {
    fn allow(known_run: bool) -> Self {
        CheckResponse {
            decision: Decision::Allow,
            pattern: String::new(),
            count: 0,
            message: String::new(),
            profile: String::new(),
            known_run,
        }
    }
}

/// A check that cannot be answered: the request names no run or no tool.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    #[error("give trace_id or run_key")]
    NoRun,
    #[error("trace_id must be 32 hex characters, got {0:?}")]
    BadTraceId(String),
    #[error("tool_name must not be empty")]
    NoToolName,
}

/// The run a check names: `run_key` when given, else the run holding `trace_id`.
pub fn run_key_of(engine: &Engine, request: &CheckRequest) -> Result<Option<Arc<str>>, CheckError> {
    if let Some(key) = request.run_key.as_deref().filter(|k| !k.is_empty()) {
        return Ok(Some(Arc::from(key)));
    }
    let trace = request
        .trace_id
        .as_deref()
        .filter(|t| !t.is_empty())
        .ok_or(CheckError::NoRun)?;
    if trace.len() != 32 || !trace.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(CheckError::BadTraceId(trace.to_owned()));
    }
    Ok(engine
        .registry
        .run_key_for_trace(&trace.to_ascii_lowercase()))
}

/// Answers `request` from the run's current state, changing nothing. An unknown run is
/// `allow` with `known_run: false`; a call whose arguments the engine would not
/// fingerprint (absent, without `match_tool_name_without_arguments`) is `allow`. Of several
/// profiles that would fire, the most severe decides (`deny` > `require_approval` > `warn`;
/// progress, `info`, allows).
pub fn check(engine: &Engine, request: &CheckRequest) -> Result<CheckResponse, CheckError> {
    if request.tool_name.is_empty() {
        return Err(CheckError::NoToolName);
    }
    let Some(run_key) = run_key_of(engine, request)? else {
        return Ok(CheckResponse::allow(false));
    };
    let arguments = request.arguments.as_ref().map(|value| match value {
        serde_json::Value::String(text) => Payload::Text(text.clone()),
        other => Payload::Json(other.clone()),
    });
    let Some(fingerprint) = engine.call_fingerprint(&request.tool_name, arguments.as_ref()) else {
        return Ok(CheckResponse::allow(
            engine.registry.run(&run_key).is_some(),
        ));
    };
    let tool_name = engine.names.get(&request.tool_name);
    let Some(answers) = engine.registry.what_if(&run_key, tool_name, fingerprint) else {
        return Ok(CheckResponse::allow(false));
    };
    let decided = answers
        .iter()
        .filter_map(|a| {
            let detection = a.detection.as_ref()?;
            let action = detection.severity.action_in(a.profile.action)?;
            Some((Decision::of_action(action), action, detection, a))
        })
        .max_by_key(|(decision, ..)| *decision);
    Ok(match decided {
        None => CheckResponse::allow(true),
        Some((decision, action, detection, answer)) => CheckResponse {
            decision,
            pattern: detection.pattern.as_str().to_owned(),
            count: u32::try_from(detection.count).unwrap_or(u32::MAX),
            message: crate::annotate::message(detection, action),
            profile: answer.profile.name.clone(),
            known_run: true,
        },
    })
}

#[cfg(test)]
mod tests;
