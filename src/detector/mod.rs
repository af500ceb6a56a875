//! The loop detector: a pure, synchronous state machine (no I/O, no async, no clock).
//!
//! Feed a run's observations in span start-time order to [`Detector::observe`]; it returns
//! at most one [`Detection`] per observation (DESIGN §4; `shared/oracle/reference.py` is the
//! executable statement of the rules).
//!
//! ```
//! use std::sync::Arc;
//! use loopwatch::detector::{Detector, Observation, Pattern, ProfileSettings, Severity};
//!
//! let mut nudge = Detector::new(Arc::new(ProfileSettings::nudge()));
//! let same_call = Observation::ToolCall {
//!     tool_name: Arc::from("fetch_url"),
//!     call_fingerprint: Some([1; 32]),
//!     result_fingerprint: Some([2; 32]), // the same error every time
//!     traits: Default::default(),
//! };
//! assert_eq!(nudge.observe(&same_call), None);
//! assert_eq!(nudge.observe(&same_call), None);
//! let detection = nudge.observe(&same_call).expect("third identical call and result");
//! assert_eq!(detection.pattern, Pattern::RepeatedResult);
//! assert_eq!(detection.severity, Severity::Warn);
//! assert_eq!((detection.call, detection.count, detection.members), (Some(3), 3, vec![0, 1, 2]));
//! ```

mod alternating;
pub mod budget;
pub mod cost;
mod cycle;
pub mod delegation;
mod escalation;
pub mod explain;
mod limits;
mod names;
mod near_repeat;
mod observation;
pub mod profile;
mod progress;
mod repeated_call;
mod repeated_outcome;
mod repeated_result;
mod repeated_text;
mod resets;
pub mod tools;
pub mod traits;

use std::collections::VecDeque;
use std::sync::Arc;

use crate::fingerprint::Fingerprint;
use escalation::Escalation;
pub use limits::{Limits, LimitsBase, ProfileError, ResultScope};
pub use names::{Pattern, Severity, UnknownName};
pub use observation::{Detection, Evidence, Observation};
pub use profile::{Action, ProfileSettings};
use repeated_result::RunStreaks;
use repeated_text::TextStreak;
pub use tools::{FingerprintRules, ToolRule, ToolRules};
pub use traits::CallTraits;

/// Per-run, per-profile detector state. Bounded: it keeps at most
/// [`ProfileSettings::history`] tool calls (the window, or the longest cycle), the current
/// text streak (at most `repeated_text` indices), and with `escalate_after` /
/// `repeated_result_scope = "run"` small per-loop / per-call counters (capped). 64 bytes
/// plus the window's allocation until a run needs [`Rare`] state: a registry keeps one per
/// profile for every run it holds.
#[derive(Clone, Debug)]
pub struct Detector {
    settings: Arc<ProfileSettings>,
    /// Live (unconsumed) tool calls with captured arguments, the last
    /// `settings.history()` of them; the window is the last `window` of these.
    history: VecDeque<CallRecord>,
    /// Escalation counts, run-scope result streaks and the text streak: boxed together on
    /// first use, so a run that needs none of them pays 8 bytes for the three.
    rare: Option<Box<Rare>>,
    /// Observations seen so far (the next observation's 0-based index).
    observations: u32,
    /// Tool calls seen so far, with or without arguments (the last call's 1-based ordinal).
    calls: u32,
    /// Text responses seen so far (the last one's 1-based ordinal).
    responses: u32,
}

/// What few runs' detectors need; each part empty (the state of a fresh detector) until
/// used.
#[derive(Clone, Debug, Default)]
struct Rare {
    /// Detections per loop (for `escalate_after`).
    escalation: Escalation,
    /// Same-result streaks per call since the last detection (`repeated_result_scope =
    /// "run"`).
    streaks: RunStreaks,
    /// The streak of identical text responses (most runs' model responses ask for tool
    /// calls).
    text: TextStreak,
}

impl Detector {
    pub fn new(settings: Arc<ProfileSettings>) -> Self {
        Detector {
            settings,
            history: VecDeque::new(),
            rare: None,
            observations: 0,
            calls: 0,
            responses: 0,
        }
    }

    /// Makes room in the history for `calls` more tool calls, in one exact allocation: a
    /// hint from the caller that knows how many calls arrive together. At most the
    /// history's length plus one (a call joins a full history before the oldest leaves).
    /// Only a hint: a size that cannot be allocated reserves nothing (the history then
    /// grows as calls arrive).
    pub fn reserve_calls(&mut self, calls: usize) {
        let wanted = (self.history.len().saturating_add(calls))
            .min(self.settings.history().saturating_add(1));
        if wanted > self.history.capacity() {
            let _ = self.history.try_reserve_exact(wanted - self.history.len());
        }
    }

    /// Forgets the loops in progress (an approval of the run): the window, same-result
    /// streaks, escalation counts and the text streak start again, as after a detection;
    /// call and response ordinals go on.
    pub fn forget_loops(&mut self) {
        self.history.clear();
        self.rare = None;
    }

    fn rare(&mut self) -> &mut Rare {
        self.rare.get_or_insert_default()
    }

    /// The run-scope same-result streaks, when any call started one.
    pub(crate) fn streaks(&self) -> Option<&RunStreaks> {
        self.rare.as_ref().map(|r| &r.streaks)
    }

    /// Length of the current text streak.
    pub(crate) fn text_streak(&self) -> usize {
        self.rare.as_ref().map_or(0, |r| r.text.len())
    }

    /// Observations fed so far.
    pub fn observations(&self) -> usize {
        self.observations as usize
    }

    /// The profile this detector applies.
    pub fn settings(&self) -> &ProfileSettings {
        &self.settings
    }

    /// The profile this detector applies, shared (a run's detectors name the profile set
    /// it was judged under: [`crate::registry::Registry::set_profiles`]).
    pub fn shared_settings(&self) -> &Arc<ProfileSettings> {
        &self.settings
    }

    /// A detector for `settings` that goes on counting where `from` stopped: observation,
    /// call and response ordinals carry over, the loops in progress do not (a reloaded
    /// profile judges the calls it sees from here on).
    pub fn continuing(settings: Arc<ProfileSettings>, from: &Detector) -> Self {
        Detector {
            observations: from.observations,
            calls: from.calls,
            responses: from.responses,
            ..Detector::new(settings)
        }
    }

    /// Feeds the next observation; returns the detection it completes, if any.
    ///
    /// A tool call joins the window (unless its arguments were not captured) and is checked
    /// for repeated_result, alternating_calls, cycle, repeated_call in that order; after a
    /// detection the window is emptied (the calls are consumed; reference `start =
    /// len(hist)`). Any tool call or tool-call response resets the text streak.
    pub fn observe(&mut self, observation: &Observation) -> Option<Detection> {
        let index = self.observations as usize;
        self.observations = self.observations.saturating_add(1);
        match observation {
            Observation::ToolCall {
                tool_name,
                call_fingerprint,
                result_fingerprint,
                traits,
            } => {
                // Every call has its ordinal, ignored and transient ones too: the numbers
                // a person counts in the trace.
                self.calls = self.calls.saturating_add(1);
                let treatment = self.settings.tools.treatment(tool_name).copied();
                if treatment.is_some_and(|t| t.ignore) || traits.has(CallTraits::TRANSIENT) {
                    return None; // removed from the sequence
                }
                self.reset_text();
                let fingerprint = (*call_fingerprint)?;
                // A move (`cd ..`) says nothing in its result: its result is not compared
                // unless it is an outcome (`cd: x: No such file or directory`).
                let compared = !traits.has(CallTraits::MOVES) || traits.has(CallTraits::OUTCOME);
                let record = CallRecord {
                    fingerprint,
                    result: result_fingerprint
                        .as_ref()
                        .filter(|_| compared)
                        .map(result_key),
                    tool_name: tool_name.clone(),
                    index: u32::try_from(index).unwrap_or(u32::MAX),
                    rule: treatment.map_or(0, |t| u32::try_from(t.entry + 1).unwrap_or(0)),
                    traits: *traits,
                };
                if self.settings.repeated_result_scope == ResultScope::Run {
                    let threshold = self.settings.call_limits(&record).repeated_result;
                    self.rare().streaks.observe(&record, threshold);
                }
                if self.history.capacity() == 0 {
                    // Most runs make few calls: start at one slot, not the default four.
                    self.history.reserve_exact(1);
                }
                self.history.push_back(record);
                while self.history.len() > self.settings.history() {
                    self.history.pop_front();
                }
                let found = self.check_calls()?;
                self.history.clear();
                if let Some(rare) = &mut self.rare {
                    rare.streaks.clear();
                }
                let mut severity =
                    self.severity(found.progress, found.pattern, &found.fingerprints);
                if let (Pattern::NearRepeat, Some(fixed), false) = (
                    found.pattern,
                    self.settings.near_repeat_severity,
                    found.progress,
                ) {
                    severity = fixed;
                }
                if severity == Severity::Kill
                    && found.evidence != Evidence::None
                    && !self.settings.inferred_kills
                {
                    severity = Severity::Warn;
                }
                Some(Detection {
                    pattern: found.pattern,
                    tool_names: found.tool_names,
                    count: found.count,
                    window: self.settings.window,
                    severity,
                    fingerprints: found.fingerprints,
                    members: found.members,
                    call: Some(self.calls as usize),
                    response: None,
                    budget: None,
                    evidence: found.evidence,
                })
            }
            Observation::ToolCallResponse => {
                self.reset_text();
                None
            }
            Observation::ToolResult { .. } | Observation::OuterResponse => None,
            Observation::TextResponse { text_fingerprint } => {
                self.responses = self.responses.saturating_add(1);
                let threshold = self.settings.repeated_text;
                if threshold == 0 {
                    return None;
                }
                let members = self
                    .rare()
                    .text
                    .observe(*text_fingerprint, index, threshold)?;
                Some(Detection {
                    pattern: Pattern::RepeatedText,
                    tool_names: Vec::new(),
                    count: members.len(),
                    window: self.settings.window,
                    severity: self.severity(false, Pattern::RepeatedText, &[]),
                    fingerprints: Vec::new(),
                    members,
                    call: None,
                    response: Some(self.responses as usize),
                    budget: None,
                    evidence: Evidence::None,
                })
            }
        }
    }

    /// A tool call or tool-call response: the text streak starts over.
    fn reset_text(&mut self) {
        if let Some(rare) = &mut self.rare {
            rare.text.reset();
        }
    }

    /// The call patterns in priority order: repeated_result (in the window, or in the run
    /// with `repeated_result_scope = "run"`), repeated_outcome (window), alternating_calls
    /// (window), cycle (may look back past the window, over the calls kept since the last
    /// detection), repeated_call (window), near_repeat (window). Thresholds are those of the
    /// completing call's tool; a pattern spanning several tools takes the largest of
    /// theirs, and is off if any of them has it off.
    fn check_calls(&mut self) -> Option<Match> {
        let s = &*self.settings;
        let history = self.history.make_contiguous();
        let window = &history[history.len().saturating_sub(s.window)..];
        let current = window.last()?;
        let limits = s.call_limits(current);
        let from = counted_from(s, window);
        let result = match s.repeated_result_scope {
            ResultScope::Window => repeated_result::check(window, limits.repeated_result, from),
            ResultScope::Run => self
                .rare
                .as_ref()
                .and_then(|rare| rare.streaks.check(current, limits.repeated_result)),
        };
        result
            .or_else(|| {
                let threshold =
                    |n: usize| joint(s, window.iter().rev().take(n), |l| l.repeated_outcome);
                repeated_outcome::check(window, &threshold, s.repeated_outcome_forms)
            })
            .or_else(|| {
                let threshold = joint(s, window.iter().rev().take(2), |l| l.alternating_calls);
                alternating::check(window, threshold)
            })
            .or_else(|| {
                let threshold =
                    |period: usize| joint(s, history.iter().rev().take(period), |l| l.cycle);
                cycle::check(history, &threshold, s.max_cycle_period)
            })
            .or_else(|| repeated_call::check(window, limits.repeated_call, from))
            .or_else(|| near_repeat::check(window, limits.near_repeat, s.near_repeat_distance))
    }

    fn severity(
        &mut self,
        progress: bool,
        pattern: Pattern,
        fingerprints: &[Fingerprint],
    ) -> Severity {
        if progress {
            return Severity::Info;
        }
        let escalate_after = self.settings.escalate_after;
        if escalate_after > 0
            && self.rare().escalation.count(pattern, fingerprints) >= escalate_after
        {
            return Severity::Kill;
        }
        match self.settings.action {
            Action::Warn => Severity::Warn,
            Action::Kill | Action::RequireApproval => Severity::Kill,
        }
    }
}

/// The threshold of a pattern over several calls: the largest of theirs, 0 (off) if any
/// of them has it off.
fn joint<'a>(
    settings: &ProfileSettings,
    calls: impl Iterator<Item = &'a CallRecord>,
    field: impl Fn(&Limits) -> usize,
) -> usize {
    let mut out = 0;
    for call in calls {
        match field(&settings.call_limits(call)) {
            0 => return 0,
            n => out = out.max(n),
        }
    }
    out
}

/// Runs a fresh [`Detector`] over `observations` and returns every detection, in order.
pub fn detect_all(settings: &Arc<ProfileSettings>, observations: &[Observation]) -> Vec<Detection> {
    let mut detector = Detector::new(settings.clone());
    observations
        .iter()
        .filter_map(|o| detector.observe(o))
        .collect()
}

/// What the detector compares results by: the first 16 bytes of the result's fingerprint.
/// Results are only ever compared inside one run's window, where 128 bits of SHA-256 are as
/// good as 256 (a collision takes about 2^64 work); what leaves the process is the whole
/// fingerprint, which the registry keeps. Half the bytes keep a window record at 88 bytes.
pub(crate) type ResultKey = [u8; 16];

/// The [`ResultKey`] of a result fingerprint.
pub(crate) fn result_key(fingerprint: &Fingerprint) -> ResultKey {
    let mut key = [0u8; 16];
    key.copy_from_slice(&fingerprint[..16]);
    key
}

/// A live tool call in the window (88 bytes; a window holds up to `history() + 1` per
/// profile, copied as calls come and go).
#[derive(Clone, Debug)]
pub(crate) struct CallRecord {
    pub(crate) fingerprint: Fingerprint,
    pub(crate) result: Option<ResultKey>,
    pub(crate) tool_name: Arc<str>,
    /// 0-based index of the observation (a detector counts observations in a `u32`).
    pub(crate) index: u32,
    /// Whose thresholds apply to this call: 0 for the profile's, `n` for its `[[tools]]`
    /// entry `n - 1` ([`ProfileSettings::call_limits`]); 4 bytes instead of the thresholds.
    pub(crate) rule: u32,
    pub(crate) traits: CallTraits,
}

/// What a call pattern found; `members` are observation indices, ascending.
#[derive(Clone, Debug)]
pub(crate) struct Match {
    pub(crate) pattern: Pattern,
    pub(crate) tool_names: Vec<Arc<str>>,
    pub(crate) count: usize,
    pub(crate) progress: bool,
    pub(crate) fingerprints: Vec<Fingerprint>,
    pub(crate) members: Vec<usize>,
    pub(crate) evidence: Evidence,
}

/// Window positions from `from` on of the calls with `fingerprint`, ascending. Inline up
/// to eight: it runs for every call of every profile, and most calls occur once or twice
/// in their window.
pub(crate) fn occurrences(
    window: &[CallRecord],
    fingerprint: &Fingerprint,
    from: usize,
) -> smallvec::SmallVec<[usize; 8]> {
    (from.min(window.len())..window.len())
        .filter(|&i| window[i].fingerprint == *fingerprint)
        .collect()
}

/// Where repeated_call and repeated_result start counting in `window` ([`resets`]): after
/// the latest state change with new arguments, with `mutation_resets` on.
pub(crate) fn counted_from(settings: &ProfileSettings, window: &[CallRecord]) -> usize {
    if settings.mutation_resets {
        resets::counted_from(window)
    } else {
        0
    }
}

pub(crate) use progress::{evidence_of_same, shows_progress};

#[cfg(test)]
pub(crate) mod tests;
