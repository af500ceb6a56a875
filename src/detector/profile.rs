//! Detection profiles: thresholds and the action a detection asks for (DESIGN §4).

use serde::{Deserialize, Serialize};

/// What a non-progress detection of this profile asks the agent runtime to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Warn,
    Kill,
}

impl Action {
    /// `"warn"` or `"kill"`, as in config and signals.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Warn => "warn",
            Action::Kill => "kill",
        }
    }
}

/// A profile's thresholds. Counts are tool calls (text responses for `repeated_text`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileSettings {
    /// Profile name (`loop.profile`), e.g. `"nudge"`.
    #[serde(skip)]
    pub name: String,
    pub action: Action,
    /// Recent tool calls looked at.
    pub window: usize,
    pub repeated_call: usize,
    pub repeated_result: usize,
    pub alternating_calls: usize,
    pub cycle: usize,
    pub max_cycle_period: usize,
    pub repeated_text: usize,
}

impl ProfileSettings {
    /// Built-in `nudge`: window 10, repeated_call 5, repeated_result 3, alternating 3,
    /// cycle 3, max period 3, repeated_text 3, action warn.
    pub fn nudge() -> Self {
        ProfileSettings {
            name: "nudge".into(),
            action: Action::Warn,
            window: 10,
            repeated_call: 5,
            repeated_result: 3,
            alternating_calls: 3,
            cycle: 3,
            max_cycle_period: 3,
            repeated_text: 3,
        }
    }

    /// Built-in `stop`: window 20, repeated_call 10, repeated_result 6, alternating 6,
    /// cycle 6, max period 3, repeated_text 6, action kill.
    pub fn stop() -> Self {
        ProfileSettings {
            name: "stop".into(),
            action: Action::Kill,
            window: 20,
            repeated_call: 10,
            repeated_result: 6,
            alternating_calls: 6,
            cycle: 6,
            max_cycle_period: 3,
            repeated_text: 6,
        }
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

impl ProfileSettings {
    /// Checks that every threshold can fire: thresholds ≥ 2; `repeated_call` and
    /// `repeated_result` ≤ `window`; 2·`alternating_calls` ≤ `window`;
    /// `max_cycle_period` ≥ 3 and `max_cycle_period`·`cycle` ≤ `window` (so every period
    /// p ≤ `max_cycle_period` fits); `repeated_text` ≥ 2 (it counts text responses, not
    /// window slots). The error names the first offending key under `profiles.<name>.`.
    pub fn validate(&self) -> Result<(), ProfileError> {
        let fail = |field: &str, reason: String| {
            Err(ProfileError {
                key: format!("profiles.{}.{field}", self.name),
                reason,
            })
        };
        let window = self.window;
        if window < 2 {
            return fail("window", format!("must be at least 2, got {window}"));
        }
        for (field, value) in [
            ("repeated_call", self.repeated_call),
            ("repeated_result", self.repeated_result),
            ("alternating_calls", self.alternating_calls),
            ("cycle", self.cycle),
            ("repeated_text", self.repeated_text),
        ] {
            if value < 2 {
                return fail(field, format!("must be at least 2, got {value}"));
            }
        }
        for (field, value) in [
            ("repeated_call", self.repeated_call),
            ("repeated_result", self.repeated_result),
        ] {
            if value > window {
                return fail(field, format!("{value} exceeds window ({window})"));
            }
        }
        let alternating = self.alternating_calls.saturating_mul(2);
        if alternating > window {
            return fail(
                "alternating_calls",
                format!("2·alternating_calls ({alternating}) exceeds window ({window})"),
            );
        }
        if self.max_cycle_period < 3 {
            return fail(
                "max_cycle_period",
                format!("must be at least 3, got {}", self.max_cycle_period),
            );
        }
        let cycle = self.max_cycle_period.saturating_mul(self.cycle);
        if cycle > window {
            return fail(
                "cycle",
                format!("max_cycle_period·cycle ({cycle}) exceeds window ({window})"),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_profiles_are_valid() {
        assert_eq!(ProfileSettings::nudge().validate(), Ok(()));
        assert_eq!(ProfileSettings::stop().validate(), Ok(()));
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
        assert_eq!(
            key_of(ProfileSettings {
                cycle: 4,
                ..nudge()
            }),
            "profiles.nudge.cycle"
        );
        let period = ProfileSettings {
            max_cycle_period: 4,
            ..nudge()
        };
        assert_eq!(key_of(period), "profiles.nudge.cycle");
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
        let result = ProfileSettings {
            repeated_result: 1,
            ..nudge()
        };
        assert_eq!(key_of(result), "profiles.nudge.repeated_result");
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
}
