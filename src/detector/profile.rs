//! Detection profiles: thresholds and the action a detection asks for (DESIGN §4).

use serde::{Deserialize, Serialize};

/// What a non-progress detection of this profile asks the agent runtime to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Warn,
    Kill,
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
