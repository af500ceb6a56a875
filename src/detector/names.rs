//! The names of patterns and severities as they appear on the wire (`loop.pattern`,
//! `loop.severity`, signals, config).

use super::Action;

/// Loop patterns, in the order they are checked for a tool call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Pattern {
    RepeatedResult,
    /// Consecutive calls, whatever their arguments, with the same outcome
    /// ([`super::repeated_outcome`]).
    RepeatedOutcome,
    AlternatingCalls,
    Cycle,
    RepeatedCall,
    /// Consecutive calls with near-identical arguments and the same result
    /// ([`super::near_repeat`]).
    NearRepeat,
    RepeatedText,
    /// A `[budgets]` limit was passed ([`super::budget`]).
    BudgetExceeded,
    /// Agents of a run handed the work around the same cycle N times ([`super::delegation`]).
    DelegationCycle,
}

impl Pattern {
    /// Every pattern, in the order call patterns are checked (repeated_text last).
    pub const ALL: [Pattern; 9] = [
        Pattern::RepeatedResult,
        Pattern::RepeatedOutcome,
        Pattern::AlternatingCalls,
        Pattern::Cycle,
        Pattern::RepeatedCall,
        Pattern::NearRepeat,
        Pattern::RepeatedText,
        Pattern::BudgetExceeded,
        Pattern::DelegationCycle,
    ];

    /// The wire name (`loop.pattern`, signals, scan output), e.g. `"repeated_call"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Pattern::RepeatedResult => "repeated_result",
            Pattern::RepeatedOutcome => "repeated_outcome",
            Pattern::AlternatingCalls => "alternating_calls",
            Pattern::Cycle => "cycle",
            Pattern::RepeatedCall => "repeated_call",
            Pattern::NearRepeat => "near_repeat",
            Pattern::RepeatedText => "repeated_text",
            Pattern::BudgetExceeded => "budget_exceeded",
            Pattern::DelegationCycle => "delegation_cycle",
        }
    }
}

/// How serious a detection is. `Info` = progress was seen (never a kill). Serialized
/// lowercase (`"info"`, `"warn"`, `"kill"`), as in `loop.severity` and signals.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warn,
    Kill,
}

impl Severity {
    /// Every severity, least severe first.
    pub const ALL: [Severity; 3] = [Severity::Info, Severity::Warn, Severity::Kill];

    /// The position in [`Severity::ALL`] (info 0, warn 1, kill 2): an index for counts
    /// and queues kept per severity.
    pub fn index(self) -> usize {
        self as usize
    }

    /// `"info"`, `"warn"` or `"kill"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warn => "warn",
            Severity::Kill => "kill",
        }
    }

    /// The action a detection of this severity asks of the agent runtime: `None` for
    /// `Info` (progress never signals).
    pub fn action(self) -> Option<Action> {
        match self {
            Severity::Info => None,
            Severity::Warn => Some(Action::Warn),
            Severity::Kill => Some(Action::Kill),
        }
    }

    /// The action a detection of this severity asks for in a profile whose action is
    /// `profile`: none for progress, `warn` for warn, and for a kill-level detection the
    /// profile's own stopping action (`kill`, or `require_approval`). The one rule signals,
    /// checks and denials share.
    pub fn action_in(self, profile: Action) -> Option<Action> {
        match (self, profile) {
            (Severity::Kill, Action::RequireApproval) => Some(Action::RequireApproval),
            _ => self.action(),
        }
    }
}

impl std::fmt::Display for Severity {
    /// The wire name, as [`Severity::as_str`].
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Severity {
    type Err = UnknownName;

    /// `"info"`, `"warn"` or `"kill"` (exact, lowercase); anything else is [`UnknownName`].
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "info" => Ok(Severity::Info),
            "warn" => Ok(Severity::Warn),
            "kill" => Ok(Severity::Kill),
            _ => Err(UnknownName {
                what: "severity",
                got: s.to_owned(),
                expected: "\"info\", \"warn\" or \"kill\"",
            }),
        }
    }
}

/// A severity or action name that is not one of the known lowercase names.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {got:?}: expected {expected}")]
pub struct UnknownName {
    /// `"severity"` or `"action"`.
    pub what: &'static str,
    /// The name given.
    pub got: String,
    /// The accepted names, for the message.
    pub expected: &'static str,
}
