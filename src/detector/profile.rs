//! Detection profiles: one serde type, [`ProfileSettings`], is the single definition of a
//! threshold set (DESIGN §4). The built-in profiles (`nudge`, `stop`) and the presets of
//! the known guards are data (`profiles.toml`, embedded), read into that same type.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::tools::ToolRules;

/// What a non-progress detection of this profile asks the agent runtime to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Warn,
    Kill,
    /// Pause the run until someone approves (`POST /v1/runs/{key}/approve`) or denies it;
    /// a profile with this action detects at kill level.
    RequireApproval,
}

impl Action {
    /// `"warn"`, `"kill"` or `"require_approval"`, as in config and signals.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Warn => "warn",
            Action::Kill => "kill",
            Action::RequireApproval => "require_approval",
        }
    }
}

impl std::fmt::Display for Action {
    /// The wire name, as [`Action::as_str`].
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Action {
    type Err = super::UnknownName;

    /// `"warn"`, `"kill"` or `"require_approval"` (exact, lowercase): how users name an action in filters (gRPC
    /// `Watch`, HTTP `GET /v1/signals?action=`); anything else is an error.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "warn" => Ok(Action::Warn),
            "kill" => Ok(Action::Kill),
            "require_approval" => Ok(Action::RequireApproval),
            _ => Err(super::UnknownName {
                what: "action",
                got: s.to_owned(),
                expected: "\"warn\", \"kill\" or \"require_approval\"",
            }),
        }
    }
}

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

/// The four call thresholds that a `[[tools]]` entry may override for its tools.
/// 0 switches the pattern off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub repeated_call: usize,
    pub repeated_result: usize,
    pub alternating_calls: usize,
    pub cycle: usize,
}

/// A profile: thresholds, the action a detection asks for and the per-profile switches.
/// Counts are tool calls (text responses for `repeated_text`); a threshold of 0 switches
/// its pattern off. Config section `[profiles.<name>]`; every key, its default and its
/// meaning are in `config.example.toml`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileSettings {
    /// Profile name (`loop.profile`), e.g. `"nudge"`.
    #[serde(skip)]
    pub name: String,
    pub action: Action,
    /// Recent tool calls looked at.
    pub window: usize,
    /// Same call N× in the window.
    pub repeated_call: usize,
    /// Same call, same result, its last N times (in the window, or in the run: below).
    pub repeated_result: usize,
    /// Where `repeated_result` looks (default `window`).
    #[serde(default)]
    pub repeated_result_scope: ResultScope,
    /// A,B,A,B… N cycles (A ≠ B).
    pub alternating_calls: usize,
    /// N repeats of a p-call sequence, 3 ≤ p ≤ `max_cycle_period`; may look back
    /// p·N calls past the window (never past the last detection).
    pub cycle: usize,
    /// Longest cycle period looked for, 3..=8.
    pub max_cycle_period: usize,
    /// N consecutive identical text-only model responses.
    pub repeated_text: usize,
    /// N times round the same cycle of agents (A hands off to B, B hands back to A: once),
    /// [`super::delegation`]; 0 = off.
    #[serde(default)]
    pub delegation_cycle: usize,
    /// The k-th detection of the same loop (pattern + fingerprints) in a run has severity
    /// `kill`, whatever `action` says; 0 = off, else ≥ 2.
    #[serde(default)]
    pub escalate_after: usize,
    /// Publish signals for this profile's warn/kill detections.
    #[serde(default = "yes")]
    pub signals: bool,
    /// false switches the profile off.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// `[[tools]]` entries that apply to this profile, compiled (set at start-up).
    #[serde(skip)]
    pub tools: Arc<ToolRules>,
}

fn yes() -> bool {
    true
}

/// The embedded built-in profiles and presets: `[builtin.<name>]` and `[preset.<name>]`.
const PROFILES_TOML: &str = include_str!("profiles.toml");

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileData {
    builtin: std::collections::BTreeMap<String, toml::Table>,
    preset: std::collections::BTreeMap<String, toml::Table>,
}

fn profile_data() -> ProfileData {
    toml::from_str(PROFILES_TOML).expect("embedded profiles.toml is valid (tested)")
}

impl ProfileSettings {
    /// Names of the built-in profiles, in the order they run.
    pub const BUILT_IN: [&'static str; 2] = ["nudge", "stop"];

    /// Built-in `nudge`: window 10, repeated_call 5, repeated_result 3, alternating 3,
    /// cycle 3, max period 3, repeated_text 3, action warn.
    pub fn nudge() -> Self {
        Self::built_in("nudge").expect("nudge is built in")
    }

    /// Built-in `stop`: window 20, repeated_call 10, repeated_result 6, alternating 6,
    /// cycle 6, max period 3, repeated_text 6, action kill.
    pub fn stop() -> Self {
        Self::built_in("stop").expect("stop is built in")
    }

    /// A built-in profile's settings as a TOML table (`None` for an unknown name).
    pub fn built_in_table(name: &str) -> Option<toml::Table> {
        profile_data().builtin.remove(name)
    }

    /// A preset's settings as a TOML table; the key `tools` holds the preset's own
    /// `[[tools]]` entries (`None` for an unknown name).
    pub fn preset_table(name: &str) -> Option<toml::Table> {
        profile_data().preset.remove(name)
    }

    /// Names of every preset (`preset = "NAME"` in a profile), sorted.
    pub fn preset_names() -> Vec<String> {
        profile_data().preset.into_keys().collect()
    }

    /// A built-in profile, named `name`.
    pub fn built_in(name: &str) -> Option<Self> {
        let table = Self::built_in_table(name)?;
        let mut settings: ProfileSettings = table.try_into().ok()?;
        settings.name = name.to_string();
        Some(settings)
    }

    /// The profile's own call thresholds (before any `[[tools]]` override).
    pub fn limits(&self) -> Limits {
        Limits {
            repeated_call: self.repeated_call,
            repeated_result: self.repeated_result,
            alternating_calls: self.alternating_calls,
            cycle: self.cycle,
        }
    }

    /// The thresholds of a window record: the profile's, or those of the `[[tools]]` entry
    /// the call matched.
    pub(crate) fn call_limits(&self, call: &super::CallRecord) -> Limits {
        call.rule
            .checked_sub(1)
            .and_then(|entry| self.tools.limits_of(entry as usize))
            .unwrap_or_else(|| self.limits())
    }

    /// Tool calls kept per run: the window, or the longest cycle when that looks further.
    pub fn history(&self) -> usize {
        self.window
            .max(self.max_cycle_period.saturating_mul(self.cycle))
            .max(1)
    }
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
    ] {
        if value == 1 {
            return fail(field, "must be 0 (off) or at least 2, got 1".into());
        }
    }
    let mut in_window = vec![("repeated_call", limits.repeated_call)];
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

impl ProfileSettings {
    /// Checks that every setting can work: `window` ≥ 2; thresholds 0 (off) or ≥ 2;
    /// `repeated_call` and (window scope) `repeated_result` ≤ `window`;
    /// 2·`alternating_calls` ≤ `window`; `max_cycle_period` in 3..=8 (a cycle may look
    /// back `max_cycle_period`·`cycle` calls, past the window); `escalate_after` 0 or ≥ 2
    /// (1 would be `action = "kill"`); `delegation_cycle` 0 or ≥ 2. The error names the first offending key under
    /// `profiles.<name>.`.
    pub fn validate(&self) -> Result<(), ProfileError> {
        let key = |field: &str| format!("profiles.{}.{field}", self.name);
        let fail = |field: &str, reason: String| {
            Err(ProfileError {
                key: key(field),
                reason,
            })
        };
        let window = self.window;
        if window < 2 {
            return fail("window", format!("must be at least 2, got {window}"));
        }
        check_limits(&self.limits(), window, self.repeated_result_scope, &key)?;
        if self.repeated_text == 1 {
            return fail(
                "repeated_text",
                "must be 0 (off) or at least 2, got 1".into(),
            );
        }
        if self.delegation_cycle == 1 {
            return fail(
                "delegation_cycle",
                "must be 0 (off) or at least 2, got 1 (one hand-back is how a supervisor works)"
                    .into(),
            );
        }
        if !(3..=8).contains(&self.max_cycle_period) {
            return fail(
                "max_cycle_period",
                format!("must be between 3 and 8, got {}", self.max_cycle_period),
            );
        }
        if self.escalate_after == 1 {
            return fail(
                "escalate_after",
                "must be 0 (off) or at least 2, got 1 (for a kill on the first detection, set action = \"kill\")".into(),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_profiles_are_valid_and_keep_their_values() {
        let nudge = ProfileSettings::nudge();
        assert_eq!(nudge.validate(), Ok(()));
        assert_eq!(
            (nudge.action, nudge.window, nudge.limits()),
            (
                Action::Warn,
                10,
                Limits {
                    repeated_call: 5,
                    repeated_result: 3,
                    alternating_calls: 3,
                    cycle: 3
                }
            )
        );
        assert_eq!((nudge.max_cycle_period, nudge.repeated_text), (3, 3));
        let stop = ProfileSettings::stop();
        assert_eq!(stop.validate(), Ok(()));
        assert_eq!(
            (stop.action, stop.window, stop.limits()),
            (
                Action::Kill,
                20,
                Limits {
                    repeated_call: 10,
                    repeated_result: 6,
                    alternating_calls: 6,
                    cycle: 6
                }
            )
        );
        assert_eq!((stop.max_cycle_period, stop.repeated_text), (3, 6));
        for s in [&nudge, &stop] {
            assert_eq!(s.escalate_after, 0);
            assert_eq!(s.repeated_result_scope, ResultScope::Window);
            assert!(s.signals && s.enabled);
        }
    }

    fn key_of(settings: ProfileSettings) -> String {
        match settings.validate() {
            Err(e) => e.key,
            Ok(()) => "ok".into(),
        }
    }

    #[test]
    fn impossible_settings_name_their_key() {
        let nudge = ProfileSettings::nudge;
        let alternating = ProfileSettings {
            alternating_calls: 6,
            ..nudge()
        };
        assert_eq!(key_of(alternating), "profiles.nudge.alternating_calls");
        let five = ProfileSettings {
            alternating_calls: 5,
            ..nudge()
        };
        assert_eq!(key_of(five), "ok");
        // a cycle may look past the window now
        let long_cycle = ProfileSettings {
            cycle: 4,
            max_cycle_period: 8,
            ..nudge()
        };
        assert_eq!(key_of(long_cycle), "ok");
        let period = ProfileSettings {
            max_cycle_period: 9,
            ..nudge()
        };
        assert_eq!(key_of(period), "profiles.nudge.max_cycle_period");
        let period = ProfileSettings {
            max_cycle_period: 2,
            ..nudge()
        };
        assert_eq!(key_of(period), "profiles.nudge.max_cycle_period");
        let call = ProfileSettings {
            repeated_call: 11,
            ..nudge()
        };
        assert_eq!(key_of(call), "profiles.nudge.repeated_call");
        let off = ProfileSettings {
            repeated_call: 0,
            ..nudge()
        };
        assert_eq!(key_of(off), "ok");
        let result = ProfileSettings {
            repeated_result: 1,
            ..nudge()
        };
        assert_eq!(key_of(result), "profiles.nudge.repeated_result");
        let run_scope = ProfileSettings {
            repeated_result: 30,
            repeated_result_scope: ResultScope::Run,
            ..nudge()
        };
        assert_eq!(key_of(run_scope), "ok");
        let text = ProfileSettings {
            repeated_text: 1,
            ..ProfileSettings::stop()
        };
        assert_eq!(key_of(text), "profiles.stop.repeated_text");
        let big_text = ProfileSettings {
            repeated_text: 50,
            ..nudge()
        };
        assert_eq!(key_of(big_text), "ok");
        let window = ProfileSettings {
            window: 1,
            ..nudge()
        };
        assert_eq!(key_of(window), "profiles.nudge.window");
        let escalate = ProfileSettings {
            escalate_after: 1,
            ..nudge()
        };
        assert_eq!(key_of(escalate), "profiles.nudge.escalate_after");
        let err = ProfileSettings {
            alternating_calls: 6,
            ..nudge()
        }
        .validate()
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "profiles.nudge.alternating_calls: 2·alternating_calls (12) exceeds window (10)"
        );
    }

    #[test]
    fn every_preset_reads_as_a_valid_profile() {
        let names = ProfileSettings::preset_names();
        assert_eq!(
            names,
            [
                "keelwave",
                "praisonai",
                "pydantic-ai-harness",
                "pydantic-deep",
                "sliding-window"
            ]
        );
        for name in names {
            let mut table = ProfileSettings::preset_table(&name).expect("listed");
            table.remove("tools");
            let mut settings: ProfileSettings = table
                .try_into()
                .unwrap_or_else(|e| panic!("preset {name}: {e}"));
            settings.name = name.clone();
            assert_eq!(settings.validate(), Ok(()), "preset {name}");
        }
    }
}
