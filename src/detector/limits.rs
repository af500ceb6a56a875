//! Call thresholds as profiles and `[[tools]]` entries share them: [`Limits`], where
//! `repeated_result` looks ([`ResultScope`]), the checks every set of them must pass
//! ([`check_limits`]) and the error that names the offending config key
//! ([`ProfileError`]). Below both [`super::profile`] and [`super::tools`].

use serde::{Deserialize, Serialize};

/// Where `repeated_result` counts identical (call, result) pairs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResultScope {
    /// Only the calls in the window (the reference rule; default).
    #[default]
    Window,
    /// Every call of the run since the profile's last detection, however far apart.
    Run,
}

/// The call thresholds that a `[[tools]]` entry may override for its tools.
/// 0 switches the pattern off.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    pub repeated_call: usize,
    pub repeated_result: usize,
    pub alternating_calls: usize,
    pub cycle: usize,
    pub repeated_outcome: usize,
    pub near_repeat: usize,
}

/// One profile's thresholds as a `[[tools]]` entry sees them: the defaults it overrides,
/// and the window and scope its own thresholds are checked against
/// ([`super::ProfileSettings::limits_base`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitsBase<'a> {
    /// Profile name, for error messages (`(profile nudge)`).
    pub profile: &'a str,
    pub limits: Limits,
    /// Recent tool calls the profile looks at.
    pub window: usize,
    pub scope: ResultScope,
}

/// An impossible profile setting (DESIGN §4: a config error at start-up that names the
/// field).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {reason}")]
pub struct ProfileError {
    /// The config key, e.g. `profiles.nudge.alternating_calls`.
    pub key: String,
    /// Why the value is impossible, with the numbers involved.
    pub reason: String,
}

/// Checks call thresholds against a window: each is 0 (off) or ≥ 2; `repeated_call` and
/// `repeated_result` (window scope) ≤ `window`; 2·`alternating_calls` ≤ `window`.
/// `cycle` may look past the window, so it has no upper bound. `key(field)` names the
/// config key of a field.
pub(crate) fn check_limits(
    limits: &Limits,
    window: usize,
    scope: ResultScope,
    key: &dyn Fn(&str) -> String,
) -> Result<(), ProfileError> {
    let fail = |field: &str, reason: String| {
        Err(ProfileError {
            key: key(field),
            reason,
        })
    };
    for (field, value) in [
        ("repeated_call", limits.repeated_call),
        ("repeated_result", limits.repeated_result),
        ("alternating_calls", limits.alternating_calls),
        ("cycle", limits.cycle),
        ("repeated_outcome", limits.repeated_outcome),
        ("near_repeat", limits.near_repeat),
    ] {
        if value == 1 {
            return fail(field, "must be 0 (off) or at least 2, got 1".into());
        }
    }
    let mut in_window = vec![
        ("repeated_call", limits.repeated_call),
        ("repeated_outcome", limits.repeated_outcome),
        ("near_repeat", limits.near_repeat),
    ];
    if scope == ResultScope::Window {
        in_window.push(("repeated_result", limits.repeated_result));
    }
    for (field, value) in in_window {
        if value > window {
            return fail(field, format!("{value} exceeds window ({window})"));
        }
    }
    let alternating = limits.alternating_calls.saturating_mul(2);
    if alternating > window {
        return fail(
            "alternating_calls",
            format!("2·alternating_calls ({alternating}) exceeds window ({window})"),
        );
    }
    Ok(())
}
