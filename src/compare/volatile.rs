//! Volatile patterns: regular expressions for the noise tools and shells print into plain-text
//! results (counters, clocks, addresses, temporary names), each replaced by a placeholder so
//! that two results that differ only in noise compare equal.
//!
//! [`PatternSet`] holds compiled patterns with a [`regex::RegexSet`] in front of them: a text
//! is scanned once to learn which patterns occur, and only those rewrite it, so a text that
//! holds no noise costs one scan and no allocation.

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};

use regex::{Regex, RegexSet};

/// One built-in pattern: a name (for docs and `explain`), the regex and its replacement
/// (`$1` refers to a capture group, as in [`Regex::replace_all`]).
pub struct Builtin {
    pub name: &'static str,
    pub regex: &'static str,
    pub replacement: &'static str,
}

/// The built-in volatile patterns (`detection.builtin_volatile_patterns = true`), applied in
/// this order. Each is written to match noise, not data: a date alone, a line number in a
/// traceback or a count of tests is kept (it changes when the work changes).
pub const BUILTIN: &[Builtin] = &[
    Builtin {
        name: "ansi_escape",
        regex: r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)",
        replacement: "",
    },
    // `\r` redraws a terminal line (progress bars, spinners): only the last state is kept.
    Builtin {
        name: "carriage_return_redraw",
        regex: r"(?m)^[^\n]*\r([^\r\n]+)$",
        replacement: "$1",
    },
    // `/bin/bash: line 13008: cd: x: No such file or directory`, `sh: 1: x: not found`: the
    // counter is the shell's input line, which grows with every command the session ran.
    Builtin {
        name: "shell_line_counter",
        regex: r"(?m)^((?:/[\w.+-]+)*/?(?:ba|z|da|k|c|tc)?sh):\s?(?:line )?\d+:",
        replacement: "$1: line <n>:",
    },
    Builtin {
        name: "timestamp",
        regex: r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2}|\b)",
        replacement: "<time>",
    },
    Builtin {
        name: "clock_time",
        regex: r"\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\b",
        replacement: "<time>",
    },
    Builtin {
        name: "uuid",
        regex: r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b",
        replacement: "<uuid>",
    },
    Builtin {
        name: "request_id",
        regex: r#"(?i)\b((?:x-)?(?:request|req|correlation|trace|span)[-_ ]?id)(["']?\s*[:=]\s*["']?)[\w-]{6,}"#,
        replacement: "$1$2<id>",
    },
    Builtin {
        name: "hex_address",
        regex: r"\b0x[0-9a-fA-F]{6,16}\b",
        replacement: "0x<addr>",
    },
    // Temporary files and directories: the whole path (names under them are random or made
    // by the run).
    Builtin {
        name: "temp_path",
        regex: r#"(?:/private)?(?:/tmp|/var/tmp|/var/folders/[\w-]+/[\w-]+/T|/dev/shm)/[^\s"'\\:,;)\]>]*|(?i:[a-z]:\\Users\\[^\\\s]+\\AppData\\Local\\Temp)\\[^\s"'<>|:]*"#,
        replacement: "<tmp>",
    },
    Builtin {
        name: "pid",
        regex: r"(?i)\b(pid|process id)(\s*[:=]?\s*)\d+",
        replacement: "$1$2<pid>",
    },
    // tqdm `45%|████▌     | 45/100 [00:05<00:06, 8.10it/s]` and `[=====>    ] 45%` bars.
    Builtin {
        name: "progress_bar",
        regex: r"\d{1,3}%\|[^|\n]*\|[^\n]*|\[[=#>\-. ]{5,}\]\s*\d{1,3}(?:\.\d+)?%",
        replacement: "<progress>",
    },
    // "took 35 ms", "in 0.52s", "elapsed: 3 seconds"; a bare unit below a second; decimal
    // seconds ("0.001s", pytest's "in 0.52s").
    Builtin {
        name: "duration",
        regex: r"(?i)\b(?:(took|in|after|elapsed|duration|time)(:?\s*))\d+(?:\.\d+)?\s?(?:ns|µs|us|ms|s|secs?|seconds?|mins?|minutes?)\b|\b\d+(?:\.\d+)?\s?(?:ns|µs|us|ms)\b|\b\d+\.\d+\s?s\b",
        replacement: "$1$2<duration>",
    },
    Builtin {
        name: "rate",
        regex: r"\b\d+(?:\.\d+)?\s?(?:it/s|s/it|[KMGT]i?B/s|B/s)",
        replacement: "<rate>",
    },
];

/// The built-in patterns that mask an identifier (a UUID, a request id). In a successful
/// result that does not read as a failure an identifier is information, not noise: "Email
/// queued with id <uuid>" for eight recipients is eight emails, not one answer eight times
/// ([`crate::compare::Comparer::result`]).
pub const IDENTIFIER_PATTERNS: &[&str] = &["uuid", "request_id"];

/// True when built-in pattern `index` ([`BUILTIN`] order) masks an identifier.
pub fn is_identifier_pattern(index: usize) -> bool {
    BUILTIN
        .get(index)
        .is_some_and(|b| IDENTIFIER_PATTERNS.contains(&b.name))
}

/// Compiled patterns, each with its replacement, and a [`RegexSet`] of all of them.
#[derive(Clone, Debug)]
pub struct PatternSet {
    set: RegexSet,
    patterns: Vec<(Regex, String)>,
}

/// A pattern that does not compile: its position in the list and the regex error.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("[{index}]: {pattern:?} is not a valid regex: {reason}")]
pub struct PatternError {
    pub index: usize,
    pub pattern: String,
    pub reason: String,
}

impl PatternSet {
    /// Compiles `(regex, replacement)` pairs (replacement syntax of
    /// [`Regex::replace_all`]). The error names the first pattern that does not compile.
    pub fn new<'a>(
        patterns: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<PatternSet, PatternError> {
        let mut compiled = Vec::new();
        for (index, (pattern, replacement)) in patterns.into_iter().enumerate() {
            let regex = Regex::new(pattern).map_err(|e| PatternError {
                index,
                pattern: pattern.to_string(),
                reason: e.to_string(),
            })?;
            compiled.push((regex, replacement.to_string()));
        }
        let set =
            RegexSet::new(compiled.iter().map(|(r, _)| r.as_str())).map_err(|e| PatternError {
                index: 0,
                pattern: String::new(),
                reason: e.to_string(),
            })?;
        Ok(PatternSet {
            set,
            patterns: compiled,
        })
    }

    /// The built-in patterns ([`BUILTIN`]), each `\b` compiled as an ASCII word boundary
    /// (`(?-u:\b)`, see [`ascii_word_boundaries`]).
    pub fn builtin() -> PatternSet {
        let compiled: Vec<(String, &str)> = BUILTIN
            .iter()
            .map(|b| (ascii_word_boundaries(b.regex), b.replacement))
            .collect();
        PatternSet::new(compiled.iter().map(|(r, rep)| (r.as_str(), *rep)))
            .expect("built-in volatile patterns compile (tested)")
    }

    /// [`PatternSet::builtin`] compiled once per process and shared by every comparer: an
    /// engine built or reloaded later compiles nothing and finds the regex engines' lazy
    /// DFA states that earlier texts built (each `Regex` and `RegexSet` keeps a pool of
    /// caches that a clone would not share).
    pub fn shared_builtin() -> Arc<PatternSet> {
        static BUILTIN_SET: OnceLock<Arc<PatternSet>> = OnceLock::new();
        Arc::clone(BUILTIN_SET.get_or_init(|| Arc::new(PatternSet::builtin())))
    }

    /// User patterns: each match is replaced by `<volatile>`.
    pub fn user(patterns: &[String]) -> Result<PatternSet, PatternError> {
        PatternSet::new(patterns.iter().map(|p| (p.as_str(), "<volatile>")))
    }

    /// No patterns.
    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// `text` with every match of every pattern replaced, in pattern order; borrowed (no
    /// allocation) when nothing matched.
    pub fn apply<'t>(&self, text: &'t str) -> Cow<'t, str> {
        self.apply_where(text, |_| true).0
    }

    /// [`PatternSet::apply`] with only the patterns whose index `keep` accepts, and whether
    /// a pattern `keep` refused matched `text` (then the whole set would have masked more).
    pub fn apply_where<'t>(
        &self,
        text: &'t str,
        keep: impl Fn(usize) -> bool,
    ) -> (Cow<'t, str>, bool) {
        if self.patterns.is_empty() {
            return (Cow::Borrowed(text), false);
        }
        let matched = self.set.matches(text);
        if !matched.matched_any() {
            return (Cow::Borrowed(text), false);
        }
        let refused = matched.iter().any(|i| !keep(i));
        let mut out = Cow::Borrowed(text);
        for index in matched.iter().filter(|&i| keep(i)) {
            let (regex, replacement) = &self.patterns[index];
            if let Cow::Owned(replaced) = regex.replace_all(&out, replacement.as_str()) {
                out = Cow::Owned(replaced);
            }
        }
        (out, refused)
    }
}

/// `regex` with every `\b` written as the ASCII word boundary `(?-u:\b)`.
///
/// The regex crate's lazy DFA cannot evaluate a Unicode word boundary once the text holds a
/// non-ASCII byte and hands the whole [`RegexSet`] scan to its slowest engine; tool results
/// are full of such bytes (progress bars, box drawing, accented words). With ASCII
/// boundaries the scan of the recorded field results is about 3× faster and its output is the
/// same on every one of them (21,387 texts); the only difference is next to a non-ASCII
/// letter, which no longer counts as part of a word (`é12:00:05` loses its clock). The
/// built-in patterns never write `\b` inside a character class, where this would be wrong.
fn ascii_word_boundaries(regex: &str) -> String {
    regex.replace(r"\b", r"(?-u:\b)")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(text: &str) -> String {
        PatternSet::builtin().apply(text).into_owned()
    }

    #[test]
    fn shell_line_counters_go() {
        assert_eq!(
            norm("/bin/bash: line 13008: cd: fastjson/: No such file or directory"),
            norm("/bin/bash: line 13023: cd: fastjson/: No such file or directory"),
        );
        assert_eq!(
            norm("/bin/bash: line 2: x\nbash: line 7: y"),
            "/bin/bash: line <n>: x\nbash: line <n>: y"
        );
        assert_eq!(
            norm("sh: 1: javac: not found"),
            "sh: line <n>: javac: not found"
        );
        // a traceback's line number is kept
        let traceback = "  File \"a.py\", line 12, in f";
        assert_eq!(norm(traceback), traceback);
    }

    #[test]
    fn clocks_ids_addresses_and_temp_paths_go() {
        assert_eq!(
            norm("2024-08-24T11:00:01.123Z INFO start; at 12:00:05 again"),
            "<time> INFO start; at <time> again"
        );
        assert_eq!(norm("id 123e4567-e89b-12d3-a456-426614174000"), "id <uuid>");
        assert_eq!(norm("request_id=ab12cd34ef"), "request_id=<id>");
        assert_eq!(norm("<object at 0x70a3c9eb2bd0>"), "<object at 0x<addr>>");
        assert_eq!(
            norm("wrote /tmp/tmpa8x9_q/out.txt, pid 4242"),
            "wrote <tmp>, pid <pid>"
        );
        // a date alone is data
        assert_eq!(norm("flight on 2024-05-01"), "flight on 2024-05-01");
    }

    #[test]
    fn durations_progress_and_escapes_go() {
        assert_eq!(
            norm("Ran 3 tests in 0.001s\n== 3 passed in 0.52s =="),
            "Ran 3 tests in <duration>\n== 3 passed in <duration> =="
        );
        assert_eq!(norm("request took 35 ms"), "request took <duration>");
        assert_eq!(norm("\x1b[31mFAILED\x1b[0m"), "FAILED");
        assert_eq!(
            norm("45%|████▌     | 45/100 [00:05<00:06, 8.10it/s]"),
            "<progress>"
        );
        assert_eq!(norm("10%\r50%\r100% done"), "100% done");
        // counts of tests or lines are kept: they change when the work changes
        let counts = "Tests run: 5, Failures: 2";
        assert_eq!(norm(counts), counts);
    }

    #[test]
    fn word_boundaries_are_ascii() {
        // Unicode text around the noise is kept, the noise goes as in ASCII text.
        assert_eq!(
            norm("█████ done at 12:00:05, took 35 ms — späť"),
            "█████ done at <time>, took <duration> — späť"
        );
        // Next to a non-ASCII letter a number starts a word of its own.
        assert_eq!(norm("é12:00:05"), "é<time>");
        assert!(BUILTIN.iter().all(|b| !b.regex.contains(r"[\b")));
    }

    #[test]
    fn text_without_noise_is_borrowed() {
        assert!(matches!(
            PatternSet::builtin().apply("No matches found"),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn a_bad_user_pattern_names_its_position() {
        let err = PatternSet::user(&["ok".into(), "bad(".into()]).unwrap_err();
        assert_eq!(err.index, 1);
        assert!(err.to_string().starts_with("[1]: \"bad(\""), "{err}");
    }
}
