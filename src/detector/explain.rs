//! Why a rule fired or did not, observation by observation (`loopwatch explain`): the
//! same [`Detector::observe`] with the counts the rules compared against their thresholds.
//! Pure and synchronous like the rest of the detector; it reads the detector's state
//! after the observation and changes nothing the detections depend on.

use super::{
    near_repeat, occurrences, progress, repeated_outcome, CallTraits, Detection, Detector,
    Evidence, Observation, ResultScope,
};

/// What one observation did in one profile's detector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// The detection it completed, exactly as [`Detector::observe`] returns it.
    pub detection: Option<Detection>,
    pub verdict: Verdict,
}

/// How a call's result compares with the result of the call before it with the same
/// arguments (in the same epoch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// No earlier call with these arguments, or a result not captured.
    Unknown,
    /// The same result.
    Same,
    /// The same once noise was removed (the raw results differ).
    SameButNoise,
    /// The result grew by the same block as the ones before it: no progress.
    Grew,
    /// A different result: progress.
    Changed,
}

/// Why a step did or did not complete a detection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A rule fired; see [`Step::detection`] (severity `info` = the results changed).
    Fired,
    /// A `[[tools]]` entry with `ignore = true` matched: removed from the sequence.
    Ignored,
    /// An error that matched the tool's `transient_errors`: removed from the sequence.
    Transient,
    /// A tool call whose arguments were not captured: it counts for the call ordinal but
    /// is part of no pattern.
    NoArguments,
    /// A tool call below every threshold. `same_calls`: calls with these arguments in the
    /// window (this one included), against `repeated_call`; `same_results`: of those, the
    /// latest in a row with this call's result (in the run since the last detection with
    /// `repeated_result_scope = "run"`), against `repeated_result` (0 when the result was
    /// not captured); `alternations`: complete A,B cycles (A ≠ B) ending the window,
    /// against `alternating_calls` (the larger of the two tools' thresholds, 0 if either
    /// has it off); `same_outcomes`: calls in a row ending here with this outcome, against
    /// `repeated_outcome`; `near_repeats`: calls in a row with near-identical arguments and
    /// this result, against `near_repeat`. Thresholds are the tool's own (`[[tools]]`) where
    /// set; 0 = off. `change` says how this call's result compares with the one before it
    /// with the same arguments.
    BelowThreshold {
        same_calls: usize,
        repeated_call: usize,
        same_results: usize,
        repeated_result: usize,
        same_outcomes: usize,
        repeated_outcome: usize,
        near_repeats: usize,
        near_repeat: usize,
        alternations: usize,
        alternating_calls: usize,
        change: Change,
        /// Earlier calls with these arguments in the window were before a state change
        /// with new arguments, so they were not counted (edit-and-retry).
        reset_by_state_change: bool,
    },
    /// A text-only model response: `streak` identical responses in a row so far, against
    /// `repeated_text` (0 = off).
    TextStreak { streak: usize, repeated_text: usize },
    /// A model response that requested tool calls: resets the text streak.
    ToolCallResponse,
    /// The result span of a call traced on two sibling spans ([`Observation::ToolResult`]):
    /// no call, changes nothing.
    ResultSpan,
    /// A model response with a span of the same response nested in it
    /// ([`Observation::OuterResponse`]): the same response, changes nothing.
    OuterResponse,
}

impl Detector {
    /// [`Detector::observe`], with the reason it fired or the counts that fell short.
    pub fn explain(&mut self, observation: &Observation) -> Step {
        let detection = self.observe(observation);
        let verdict = if detection.is_some() {
            Verdict::Fired
        } else {
            self.verdict_after(observation)
        };
        Step { detection, verdict }
    }

    /// The verdict of an observation that completed no detection, read from the state it
    /// left (its call is the last in the history).
    fn verdict_after(&self, observation: &Observation) -> Verdict {
        match observation {
            Observation::ToolCall {
                tool_name,
                call_fingerprint,
                result_fingerprint,
                traits,
            } => {
                let treatment = self.settings.tools.treatment(tool_name);
                if treatment.is_some_and(|t| t.ignore) {
                    return Verdict::Ignored;
                }
                if traits.has(CallTraits::TRANSIENT) {
                    return Verdict::Transient;
                }
                if call_fingerprint.is_none() {
                    return Verdict::NoArguments;
                }
                let limits = treatment.map_or_else(|| self.settings.limits(), |t| t.limits);
                let history: Vec<_> = self.history.iter().cloned().collect();
                let window = &history[history.len().saturating_sub(self.settings.window)..];
                let Some(current) = window.last() else {
                    return Verdict::NoArguments;
                };
                let from = super::counted_from(&self.settings, window);
                let same = occurrences(window, &current.fingerprint, from);
                let change = match same.len().checked_sub(2).map(|i| &window[same[i]]) {
                    None => Change::Unknown,
                    Some(_) if current.result.is_none() => Change::Unknown,
                    Some(before) if before.result == current.result => {
                        if current.traits.has(CallTraits::NOISE) {
                            Change::SameButNoise
                        } else {
                            Change::Same
                        }
                    }
                    Some(_) => match progress::shows_progress(same.iter().map(|&i| &window[i])) {
                        (false, Evidence::Growth) => Change::Grew,
                        _ => Change::Changed,
                    },
                };
                let reset_by_state_change = window[..from.min(window.len())]
                    .iter()
                    .any(|r| r.fingerprint == current.fingerprint);
                let same_results = match (result_fingerprint, self.settings.repeated_result_scope) {
                    (None, _) => 0,
                    (Some(_), ResultScope::Run) => {
                        self.streaks().map_or(0, |s| s.len_of(&current.fingerprint))
                    }
                    (Some(result), ResultScope::Window) => same
                        .iter()
                        .rev()
                        .take_while(|&&i| window[i].result == Some(super::result_key(result)))
                        .count(),
                };
                Verdict::BelowThreshold {
                    same_calls: same.len(),
                    repeated_call: limits.repeated_call,
                    same_results,
                    repeated_result: limits.repeated_result,
                    same_outcomes: repeated_outcome::streak(
                        window,
                        self.settings.repeated_outcome_forms,
                    ),
                    repeated_outcome: limits.repeated_outcome,
                    near_repeats: near_repeat::near_streak(
                        window,
                        self.settings.near_repeat_distance,
                    ),
                    near_repeat: limits.near_repeat,
                    change,
                    reset_by_state_change,
                    alternations: alternating_suffix(window) / 2,
                    alternating_calls: super::joint(
                        &self.settings,
                        window.iter().rev().take(2),
                        |l| l.alternating_calls,
                    ),
                }
            }
            Observation::TextResponse { .. } => Verdict::TextStreak {
                streak: self.text_streak(),
                repeated_text: self.settings.repeated_text,
            },
            Observation::ToolCallResponse => Verdict::ToolCallResponse,
            Observation::ToolResult { .. } => Verdict::ResultSpan,
            Observation::OuterResponse => Verdict::OuterResponse,
        }
    }
}

/// Length of the longest A,B,A,B… suffix of `window` with A ≠ B (1 for a single call).
fn alternating_suffix(window: &[super::CallRecord]) -> usize {
    let n = window.len();
    if n < 2 || window[n - 1].fingerprint == window[n - 2].fingerprint {
        return n.min(1);
    }
    let mut len = 2;
    while len < n && window[n - 1 - len].fingerprint == window[n + 1 - len].fingerprint {
        len += 1;
    }
    len
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detector::{Pattern, ProfileSettings, Severity};
    use std::sync::Arc;

    fn call(tool: &str, args: u8, result: u8) -> Observation {
        Observation::ToolCall {
            tool_name: Arc::from(tool),
            call_fingerprint: Some([args; 32]),
            result_fingerprint: Some([result; 32]),
            traits: CallTraits::default(),
        }
    }

    #[test]
    fn counts_fall_short_then_the_rule_fires_as_observe_says() {
        let mut d = Detector::new(Arc::new(ProfileSettings::nudge()));
        let mut plain = Detector::new(Arc::new(ProfileSettings::nudge()));
        let calls = [
            call("read", 1, 1),
            call("read", 1, 2),
            call("list", 2, 1),
            call("read", 1, 2),
        ];
        let verdicts: Vec<Verdict> = calls
            .iter()
            .map(|o| {
                let step = d.explain(o);
                assert_eq!(step.detection, plain.observe(o));
                step.verdict
            })
            .collect();
        let below = |same_calls, same_results, alternations, change| Verdict::BelowThreshold {
            same_calls,
            repeated_call: 5,
            same_results,
            repeated_result: 3,
            same_outcomes: 0,
            repeated_outcome: 6,
            near_repeats: 0,
            near_repeat: 6,
            alternations,
            alternating_calls: 3,
            change,
            reset_by_state_change: false,
        };
        assert_eq!(
            verdicts,
            [
                below(1, 1, 0, Change::Unknown),
                below(2, 1, 0, Change::Changed),
                below(1, 1, 1, Change::Unknown),
                below(3, 2, 1, Change::Same)
            ]
        );
        let step = d.explain(&call("read", 1, 2));
        assert_eq!(step.verdict, Verdict::Fired);
        let fired = step.detection.expect("third same result");
        assert_eq!(fired.pattern, Pattern::RepeatedResult);
        assert_eq!(fired.severity, Severity::Warn);
    }

    #[test]
    fn alternation_counts_complete_cycles_at_the_end() {
        let mut d = Detector::new(Arc::new(ProfileSettings::nudge()));
        // Results change every call: only the alternation builds up.
        let calls = ["c", "a", "b", "a", "b", "a"];
        let cycles: Vec<usize> = calls
            .iter()
            .enumerate()
            .map(|(i, tool)| {
                let args = tool.as_bytes()[0];
                match d.explain(&call(tool, args, i as u8)).verdict {
                    Verdict::BelowThreshold { alternations, .. } => alternations,
                    other => panic!("{other:?}"),
                }
            })
            .collect();
        assert_eq!(cycles, [0, 1, 1, 1, 2, 2]);
        let step = d.explain(&call("b", b'b', 9));
        assert_eq!(step.verdict, Verdict::Fired);
        let fired = step.detection.expect("a,b three times");
        assert_eq!(fired.pattern, Pattern::AlternatingCalls);
        assert_eq!(fired.severity, Severity::Info);
    }

    #[test]
    fn responses_and_uncaptured_arguments() {
        let mut d = Detector::new(Arc::new(ProfileSettings::nudge()));
        let text = Observation::TextResponse {
            text_fingerprint: [9; 32],
        };
        let streak = |streak| Verdict::TextStreak {
            streak,
            repeated_text: 3,
        };
        assert_eq!(d.explain(&text).verdict, streak(1));
        assert_eq!(d.explain(&text).verdict, streak(2));
        assert_eq!(
            d.explain(&Observation::ToolCallResponse).verdict,
            Verdict::ToolCallResponse
        );
        assert_eq!(d.explain(&text).verdict, streak(1));
        let blind = Observation::ToolCall {
            tool_name: Arc::from("read"),
            call_fingerprint: None,
            result_fingerprint: None,
            traits: CallTraits::default(),
        };
        assert_eq!(d.explain(&blind).verdict, Verdict::NoArguments);
    }
}
