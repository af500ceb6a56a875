//! Detection profiles: one serde type, [`ProfileSettings`], is the single definition of a
//! threshold set (DESIGN §4). The built-in profiles (`nudge`, `stop`) and the presets of
//! the known guards are data (`profiles.toml`, embedded), read into that same type.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::limits::{check_limits, Limits, LimitsBase, ProfileError, ResultScope};
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
    /// N consecutive calls, whatever their arguments, with the same outcome (the same
    /// error, the same "not found"; compared after normalisation, trivially short results
    /// excluded). 0 = off (the default of profiles written without it).
    #[serde(default)]
    pub repeated_outcome: usize,
    /// Different outcomes a `repeated_outcome` streak may hold, 1..=4 (default 1: one
    /// outcome; the built-ins say 2: an agent stuck between two errors by turns), each of
    /// them at least twice among the N calls ([`super::repeated_outcome`]).
    #[serde(default = "one")]
    pub repeated_outcome_forms: usize,
    /// N consecutive calls of one tool with near-identical arguments (SimHash within
    /// `near_repeat_distance` bits) and the same result, at least two of them different.
    /// 0 = off.
    #[serde(default)]
    pub near_repeat: usize,
    /// Bits (of 32) in which two calls' argument SimHashes may differ for `near_repeat`
    /// (default 6; unrelated texts differ in about 16).
    #[serde(default = "default_near_distance")]
    pub near_repeat_distance: u32,
    /// Severity of a `near_repeat` detection; unset = the profile's action.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub near_repeat_severity: Option<super::Severity>,
    /// A call that changes state with new arguments (an edit, a write, `sed -i`, `cd X`)
    /// starts the repeated_call / repeated_result count of the calls after it over: edit,
    /// then run the same test again, is work (default true).
    #[serde(default = "yes")]
    pub mutation_resets: bool,
    /// A detection whose results were compared without their volatile noise
    /// ([`super::Evidence::Noise`]) or grew by the same block ([`super::Evidence::Growth`])
    /// may be a kill (default false: at most `warn`, since normalisation can hide a number
    /// that mattered; a kill rests on results compared as recorded).
    #[serde(default)]
    pub inferred_kills: bool,
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

fn one() -> usize {
    1
}

fn default_near_distance() -> u32 {
    6
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

    /// Built-in `nudge`: window 10, repeated_call 5, repeated_result 3, repeated_outcome 6,
    /// alternating 3, cycle 3, max period 3, near_repeat 6, repeated_text 3, action warn.
    pub fn nudge() -> Self {
        Self::built_in("nudge").expect("nudge is built in")
    }

    /// Built-in `stop`: window 20, repeated_call 10, repeated_result 6, repeated_outcome 12,
    /// alternating 6, cycle 6, max period 3, near_repeat 0 (off), repeated_text 6, action kill.
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
            repeated_outcome: self.repeated_outcome,
            near_repeat: self.near_repeat,
        }
    }

    /// True when `near_repeat` can fire in this profile: its own threshold, or a `[[tools]]`
    /// entry's, is not 0. The engine computes the arguments' SimHash only while some profile
    /// says so.
    pub fn uses_near_repeat(&self) -> bool {
        self.near_repeat > 0 || self.tools.any_near_repeat()
    }

    /// True when no single observation can complete a detection of this profile: every
    /// threshold is 0 (off) or at least 2, as [`ProfileSettings::validate`] requires of a
    /// loaded profile (its `[[tools]]` entries are checked when compiled). A profile built
    /// in code without validation may say false.
    pub fn needs_two_observations(&self) -> bool {
        let l = self.limits();
        [
            l.repeated_call,
            l.repeated_result,
            l.alternating_calls,
            l.cycle,
            l.repeated_outcome,
            l.near_repeat,
            self.repeated_text,
        ]
        .iter()
        .all(|&threshold| threshold != 1)
    }

    /// What this profile's `[[tools]]` entries default to and are checked against.
    pub fn limits_base(&self) -> LimitsBase<'_> {
        LimitsBase {
            profile: &self.name,
            limits: self.limits(),
            window: self.window,
            scope: self.repeated_result_scope,
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

impl ProfileSettings {
    /// Checks that every setting can work: `window` ≥ 2; thresholds 0 (off) or ≥ 2;
    /// `repeated_call`, `repeated_outcome`, `near_repeat` and (window scope)
    /// `repeated_result` ≤ `window`; `near_repeat_distance` ≤ 16;
    /// 2·`alternating_calls` ≤ `window`; `max_cycle_period` in 3..=8 (a cycle may look
    /// back `max_cycle_period`·`cycle` calls, past the window); `escalate_after` 0 or ≥ 2
    /// (1 would be `action = "kill"`); `delegation_cycle` 0 or ≥ 2; `repeated_outcome_forms`
    /// in 1..=4. The error names the first offending key under
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
        if self.near_repeat_distance > 16 {
            return fail(
                "near_repeat_distance",
                format!(
                    "must be at most 16 (of 32 bits; unrelated texts differ in about 16), got {}",
                    self.near_repeat_distance
                ),
            );
        }
        let forms = self.repeated_outcome_forms;
        if !(1..=super::repeated_outcome::MAX_FORMS).contains(&forms) {
            return fail(
                "repeated_outcome_forms",
                format!(
                    "must be between 1 and {}, got {forms}",
                    super::repeated_outcome::MAX_FORMS
                ),
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
                    cycle: 3,
                    repeated_outcome: 6,
                    near_repeat: 6,
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
                    cycle: 6,
                    repeated_outcome: 12,
                    near_repeat: 0,
                }
            )
        );
        assert_eq!((stop.max_cycle_period, stop.repeated_text), (3, 6));
        for s in [&nudge, &stop] {
            assert_eq!(s.escalate_after, 0);
            assert_eq!(s.repeated_result_scope, ResultScope::Window);
            assert!(s.signals && s.enabled && s.mutation_resets);
            assert_eq!((s.near_repeat_distance, s.near_repeat_severity), (6, None));
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
