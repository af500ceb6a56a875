//! Per-tool rules (`[[tools]]`): a glob on the tool name, and what changes for the tools
//! it matches. The first matching entry wins (entries are tried in file order; a preset's
//! own entries come after the user's).
//!
//! Two kinds of keys, applied at two places:
//! - detection keys (`ignore`, threshold overrides), per profile: [`ToolRules`], compiled
//!   for one profile from the entries whose `profiles` list is empty or names it;
//! - fingerprint keys (`volatile_keys`, `result_volatile_keys`, `transient_errors`,
//!   `result_volatile_patterns`, `arguments_volatile_patterns`, `mutating`, `shell`), which
//!   every profile shares: [`FingerprintRules`], from the entries without a `profiles`
//!   list (an entry limited to some profiles may not set them).

use std::collections::HashSet;

use globset::{Glob, GlobSet, GlobSetBuilder};
use regex::Regex;
use serde::{Deserialize, Serialize};

use super::limits::{check_limits, Limits, LimitsBase, ProfileError};
use crate::compare::{PatternSet, ToolCompare};

/// One `[[tools]]` entry as written in config.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolRule {
    /// Glob on the tool name (`*`, `?`, `[abc]`, `{a,b}`), e.g. `"wait_*"`.
    #[serde(rename = "match")]
    pub pattern: String,
    /// The call is removed from the sequence: it is part of no pattern and breaks none.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignore: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeated_call: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeated_result: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alternating_calls: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycle: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeated_outcome: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub near_repeat: Option<usize>,
    /// Limit the entry to these profiles (empty = every profile).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub profiles: Vec<String>,
    /// Extra argument keys removed before fingerprinting (besides `detection.volatile_keys`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volatile_keys: Vec<String>,
    /// Extra result keys removed (besides `detection.result_volatile_keys`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub result_volatile_keys: Vec<String>,
    /// Regex on the error message: an error result it matches is transient (a rate
    /// limit, a timeout) and never counts as "no progress".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transient_errors: Option<String>,
    /// Regexes whose matches in a plain-text result (or error message) are noise: each is
    /// replaced by `<volatile>` before results are compared (after the built-in patterns).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub result_volatile_patterns: Vec<String>,
    /// Regexes whose matches in the arguments' text are removed (replaced by `<volatile>`)
    /// before the call is fingerprinted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub arguments_volatile_patterns: Vec<String>,
    /// The tool changes state (true) or does not (false), whatever its name or command
    /// says; unset = the heuristics (`detection.mutation_heuristics`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mutating: Option<bool>,
    /// The tool runs shell commands (its arguments hold a command); unset = by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell: Option<bool>,
}

impl ToolRule {
    fn sets_fingerprint_keys(&self) -> bool {
        !self.volatile_keys.is_empty()
            || !self.result_volatile_keys.is_empty()
            || self.transient_errors.is_some()
            || !self.result_volatile_patterns.is_empty()
            || !self.arguments_volatile_patterns.is_empty()
            || self.mutating.is_some()
            || self.shell.is_some()
    }

    fn applies_to(&self, profile: &str) -> bool {
        self.profiles.is_empty() || self.profiles.iter().any(|p| p == profile)
    }

    /// `limits` with this entry's overrides.
    fn limits(&self, base: Limits) -> Limits {
        Limits {
            repeated_call: self.repeated_call.unwrap_or(base.repeated_call),
            repeated_result: self.repeated_result.unwrap_or(base.repeated_result),
            alternating_calls: self.alternating_calls.unwrap_or(base.alternating_calls),
            cycle: self.cycle.unwrap_or(base.cycle),
            repeated_outcome: self.repeated_outcome.unwrap_or(base.repeated_outcome),
            near_repeat: self.near_repeat.unwrap_or(base.near_repeat),
        }
    }
}

/// What a matching entry means for one profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ToolTreatment {
    /// The call is dropped from the sequence.
    pub ignore: bool,
    /// The thresholds that apply to the call.
    pub limits: Limits,
    /// Index of the entry in the profile's list (config entries first, then the preset's).
    pub entry: usize,
}

/// The `[[tools]]` entries of one profile, compiled. Empty by default (no glob is ever
/// run then).
#[derive(Clone, Debug, Default)]
pub struct ToolRules {
    set: GlobSet,
    treatments: Vec<ToolTreatment>,
    patterns: Vec<String>,
}

impl ToolRules {
    /// True when some entry gives `near_repeat` a threshold (not 0) for the tools it matches.
    pub fn any_near_repeat(&self) -> bool {
        self.treatments
            .iter()
            .any(|t| !t.ignore && t.limits.near_repeat > 0)
    }
}

impl PartialEq for ToolRules {
    fn eq(&self, other: &Self) -> bool {
        self.treatments == other.treatments && self.patterns == other.patterns
    }
}
impl Eq for ToolRules {}

fn glob(pattern: &str, key: &str) -> Result<Glob, ProfileError> {
    Glob::new(pattern).map_err(|e| ProfileError {
        key: key.to_string(),
        reason: format!("{pattern:?} is not a valid glob: {}", e.kind()),
    })
}

impl ToolRules {
    /// Compiles, for `profile`, the entries that apply to it: `(config key prefix, entry)`
    /// pairs in priority order. Thresholds are checked against the profile's window;
    /// errors name the key (e.g. `tools[2].repeated_call`).
    pub fn compile(
        profile: &LimitsBase,
        entries: &[(String, ToolRule)],
    ) -> Result<ToolRules, ProfileError> {
        let mut builder = GlobSetBuilder::new();
        let mut rules = ToolRules::default();
        for (key, entry) in entries
            .iter()
            .filter(|(_, e)| e.applies_to(profile.profile))
        {
            builder.add(glob(&entry.pattern, &format!("{key}.match"))?);
            let limits = entry.limits(profile.limits);
            check_limits(&limits, profile.window, profile.scope, &|field| {
                format!("{key}.{field}")
            })
            .map_err(|e| ProfileError {
                reason: format!("{} (profile {})", e.reason, profile.profile),
                ..e
            })?;
            rules.treatments.push(ToolTreatment {
                ignore: entry.ignore,
                limits,
                entry: rules.patterns.len(),
            });
            rules.patterns.push(entry.pattern.clone());
        }
        rules.set = builder.build().map_err(|e| ProfileError {
            key: "tools".into(),
            reason: e.to_string(),
        })?;
        Ok(rules)
    }

    /// The first entry matching `tool_name`, if any.
    pub fn treatment(&self, tool_name: &str) -> Option<&ToolTreatment> {
        if self.treatments.is_empty() {
            return None;
        }
        let first = self.set.matches(tool_name).into_iter().min()?;
        self.treatments.get(first)
    }

    /// The thresholds of entry `entry`.
    pub fn limits_of(&self, entry: usize) -> Option<Limits> {
        self.treatments.get(entry).map(|t| t.limits)
    }

    /// The glob of entry `entry` (for explanations).
    pub fn pattern(&self, entry: usize) -> Option<&str> {
        self.patterns.get(entry).map(String::as_str)
    }

    /// No entries.
    pub fn is_empty(&self) -> bool {
        self.treatments.is_empty()
    }
}

/// Fingerprint keys of one entry, resolved against the global lists.
#[derive(Clone, Debug)]
pub struct FingerprintTreatment {
    /// Argument keys removed: `detection.volatile_keys` ∪ the entry's.
    pub volatile_keys: HashSet<String>,
    /// Result keys removed: `detection.result_volatile_keys` ∪ the entry's.
    pub result_volatile_keys: HashSet<String>,
    /// Error messages that are transient.
    pub transient_errors: Option<Regex>,
    /// `result_volatile_patterns`, `arguments_volatile_patterns`, `mutating`, `shell`.
    pub compare: ToolCompare,
}

/// The fingerprint keys of the `[[tools]]` entries without a `profiles` list.
#[derive(Clone, Debug, Default)]
pub struct FingerprintRules {
    set: GlobSet,
    treatments: Vec<FingerprintTreatment>,
}

impl FingerprintRules {
    /// Compiles every entry (their globs and regexes are checked even when a `profiles`
    /// list excludes them from fingerprinting). `volatile_keys` / `result_volatile_keys`
    /// are the global lists. Errors name the key (`tools[i].match`,
    /// `tools[i].transient_errors`, `tools[i].profiles`).
    pub fn compile(
        entries: &[ToolRule],
        volatile_keys: &[String],
        result_volatile_keys: &[String],
    ) -> Result<FingerprintRules, ProfileError> {
        let mut builder = GlobSetBuilder::new();
        let mut treatments = Vec::new();
        for (i, entry) in entries.iter().enumerate() {
            let key = |field: &str| format!("tools[{i}].{field}");
            let g = glob(&entry.pattern, &key("match"))?;
            let transient_errors = match &entry.transient_errors {
                Some(text) => Some(Regex::new(text).map_err(|e| ProfileError {
                    key: key("transient_errors"),
                    reason: format!("{text:?} is not a valid regex: {e}"),
                })?),
                None => None,
            };
            let patterns = |field: &str, list: &[String]| -> Result<_, ProfileError> {
                if list.is_empty() {
                    return Ok(None);
                }
                PatternSet::user(list).map(Some).map_err(|e| ProfileError {
                    key: format!("{}[{}]", key(field), e.index),
                    reason: format!("{:?} is not a valid regex: {}", e.pattern, e.reason),
                })
            };
            let compare = ToolCompare {
                result_patterns: patterns(
                    "result_volatile_patterns",
                    &entry.result_volatile_patterns,
                )?,
                argument_patterns: patterns(
                    "arguments_volatile_patterns",
                    &entry.arguments_volatile_patterns,
                )?,
                mutating: entry.mutating,
                shell: entry.shell,
            };
            if !entry.profiles.is_empty() {
                if entry.sets_fingerprint_keys() {
                    return Err(ProfileError {
                        key: key("profiles"),
                        reason: "volatile_keys, result_volatile_keys, transient_errors, result_volatile_patterns, arguments_volatile_patterns, mutating and shell act on fingerprints, which every profile shares: move them to an entry without profiles".into(),
                    });
                }
                continue;
            }
            let union = |global: &[String], extra: &[String]| -> HashSet<String> {
                global.iter().chain(extra).cloned().collect()
            };
            builder.add(g);
            treatments.push(FingerprintTreatment {
                volatile_keys: union(volatile_keys, &entry.volatile_keys),
                result_volatile_keys: union(result_volatile_keys, &entry.result_volatile_keys),
                transient_errors,
                compare,
            });
        }
        let set = builder.build().map_err(|e| ProfileError {
            key: "tools".into(),
            reason: e.to_string(),
        })?;
        Ok(FingerprintRules { set, treatments })
    }

    /// The first entry (without a `profiles` list) matching `tool_name`.
    pub fn treatment(&self, tool_name: &str) -> Option<&FingerprintTreatment> {
        if self.treatments.is_empty() {
            return None;
        }
        let first = self.set.matches(tool_name).into_iter().min()?;
        self.treatments.get(first)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detector::ProfileSettings;

    fn rule(pattern: &str) -> ToolRule {
        ToolRule {
            pattern: pattern.into(),
            ..ToolRule::default()
        }
    }

    #[test]
    fn first_matching_entry_wins() {
        let nudge = ProfileSettings::nudge();
        let entries = vec![
            (
                "tools[0]".to_string(),
                ToolRule {
                    ignore: true,
                    ..rule("wait_*")
                },
            ),
            (
                "tools[1]".to_string(),
                ToolRule {
                    repeated_call: Some(8),
                    ..rule("*")
                },
            ),
        ];
        let rules = ToolRules::compile(&nudge.limits_base(), &entries).expect("valid");
        let wait = rules.treatment("wait_for_job").expect("matches");
        assert!(wait.ignore);
        assert_eq!(wait.entry, 0);
        let other = rules.treatment("read_file").expect("matches *");
        assert!(!other.ignore);
        assert_eq!(other.limits.repeated_call, 8);
        assert_eq!(other.limits.repeated_result, 3);
        assert_eq!(rules.pattern(1), Some("*"));
    }

    #[test]
    fn profiles_limit_an_entry() {
        let entries = vec![(
            "tools[0]".to_string(),
            ToolRule {
                ignore: true,
                profiles: vec!["stop".into()],
                ..rule("poll")
            },
        )];
        let nudge = ToolRules::compile(&ProfileSettings::nudge().limits_base(), &entries).unwrap();
        assert!(nudge.treatment("poll").is_none());
        let stop = ToolRules::compile(&ProfileSettings::stop().limits_base(), &entries).unwrap();
        assert!(stop.treatment("poll").expect("limited to stop").ignore);
    }

    #[test]
    fn bad_entries_name_their_key() {
        let bad_glob = ToolRules::compile(
            &ProfileSettings::nudge().limits_base(),
            &[("tools[3]".into(), rule("read_[file"))],
        )
        .unwrap_err();
        assert_eq!(bad_glob.key, "tools[3].match");
        let too_big = ToolRules::compile(
            &ProfileSettings::nudge().limits_base(),
            &[(
                "tools[0]".into(),
                ToolRule {
                    repeated_call: Some(11),
                    ..rule("a")
                },
            )],
        )
        .unwrap_err();
        assert_eq!(too_big.key, "tools[0].repeated_call");
        assert!(
            too_big.reason.contains("profile nudge"),
            "{}",
            too_big.reason
        );
        let bad_regex = FingerprintRules::compile(
            &[ToolRule {
                transient_errors: Some("429 (".into()),
                ..rule("a")
            }],
            &[],
            &[],
        )
        .unwrap_err();
        assert_eq!(bad_regex.key, "tools[0].transient_errors");
        let bad_pattern = FingerprintRules::compile(
            &[ToolRule {
                result_volatile_patterns: vec!["ok".into(), "took (".into()],
                ..rule("a")
            }],
            &[],
            &[],
        )
        .unwrap_err();
        assert_eq!(bad_pattern.key, "tools[0].result_volatile_patterns[1]");
        assert!(
            bad_pattern.reason.contains("\"took (\""),
            "{}",
            bad_pattern.reason
        );
        let limited = FingerprintRules::compile(
            &[ToolRule {
                volatile_keys: vec!["page".into()],
                profiles: vec!["stop".into()],
                ..rule("a")
            }],
            &[],
            &[],
        )
        .unwrap_err();
        assert_eq!(limited.key, "tools[0].profiles");
    }

    #[test]
    fn fingerprint_keys_add_to_the_global_lists() {
        let rules = FingerprintRules::compile(
            &[ToolRule {
                volatile_keys: vec!["page_token".into()],
                transient_errors: Some("(?i)rate limit|429".into()),
                ..rule("search*")
            }],
            &["timestamp".into()],
            &["tool_call_id".into()],
        )
        .unwrap();
        let t = rules.treatment("search_web").expect("matches");
        assert!(t.volatile_keys.contains("timestamp") && t.volatile_keys.contains("page_token"));
        assert!(t.result_volatile_keys.contains("tool_call_id"));
        let regex = t.transient_errors.as_ref().expect("set");
        assert!(regex.is_match("HTTP 429 Too Many Requests"));
        assert!(!regex.is_match("file not found"));
        assert!(rules.treatment("read_file").is_none());
    }
}
