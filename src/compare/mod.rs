//! How tool calls are compared as a person would compare them (issue 29): the forms of a
//! call's arguments and result that detection compares, next to the canonical fingerprints
//! of [`crate::fingerprint`] (which stay what they are: the call fingerprint is exported).
//!
//! - **Results** in plain text (and error messages) lose their noise: the built-in
//!   [`volatile`] patterns, then the tool's `result_volatile_patterns`, then the words of the
//!   call's arguments echoed in them ([`echo`]). Two results that differ only there have one
//!   comparison fingerprint. JSON results are compared as before (`result_volatile_keys`).
//! - **Outcomes**: a result counts as an outcome (for `repeated_outcome`) when it says
//!   something: an error, or at least `min_outcome_letters` letters outside markup; for a
//!   call that writes, only an error or a result that reads as a failure ([`is_failure`]).
//! - **Effects**: whether a call changes state ([`mutation`] by tool name, [`shell`] by
//!   command for shell tools, or config `mutating`).
//! - **Signatures** ([`signature`]): a result's growth signature and the arguments' SimHash.
//!
//! Pure functions over text; compiled once (patterns) and shared by every request.

pub mod echo;
pub mod json_scan;
pub mod mutation;
pub mod shell;
pub mod signature;
pub mod volatile;

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};

use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::conventions::event::Payload;
pub use mutation::NameClass;
pub use shell::CommandEffect;
pub use volatile::{PatternError, PatternSet};

/// `[detection]` keys of the comparison (defaults in [`CompareConfig::default`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CompareConfig {
    /// Apply the built-in volatile patterns ([`volatile::BUILTIN`]) to plain-text results and
    /// error messages before comparing them (default true).
    pub builtin_volatile_patterns: bool,
    /// Mask the words of a call's arguments in its result before comparing outcomes
    /// (default true).
    pub argument_echo: bool,
    /// Letters (outside markup tags) a result needs to count as an outcome (default 10).
    pub min_outcome_letters: usize,
    /// Class tools as state-changing by name and shell tools by command (default true;
    /// `[[tools]] mutating` overrides either way).
    pub mutation_heuristics: bool,
    /// Compare shell tools' commands in normal form ([`shell::normalise`]: whitespace,
    /// quoting, a leading `cd DIR &&`); this changes their call fingerprints (default false).
    pub shell_normalise: bool,
}

impl Default for CompareConfig {
    fn default() -> Self {
        CompareConfig {
            builtin_volatile_patterns: true,
            argument_echo: true,
            min_outcome_letters: 10,
            mutation_heuristics: true,
            shell_normalise: false,
        }
    }
}

/// A `[[tools]]` entry's comparison keys, compiled.
#[derive(Clone, Debug, Default)]
pub struct ToolCompare {
    /// `result_volatile_patterns`: each match becomes `<volatile>`.
    pub result_patterns: Option<PatternSet>,
    /// `arguments_volatile_patterns`, applied to the arguments' text before fingerprinting.
    pub argument_patterns: Option<PatternSet>,
    /// `mutating`: the tool changes state (or not), whatever its name or command says.
    pub mutating: Option<bool>,
    /// `shell`: the tool runs shell commands (its arguments hold a command).
    pub shell: Option<bool>,
}

/// The comparison settings, compiled.
#[derive(Clone, Debug)]
pub struct Comparer {
    /// The built-in volatile patterns: one compiled set per process ([`PatternSet::shared_builtin`]).
    builtin: Option<Arc<PatternSet>>,
    config: CompareConfig,
    /// Compute the arguments' SimHash (for `near_repeat`; on in every engine built from config,
    /// since a reload may turn the rule on).
    pub near_signatures: bool,
}

impl Default for Comparer {
    fn default() -> Self {
        Comparer::new(&CompareConfig::default())
    }
}

/// What the comparison reads from a call's arguments.
#[derive(Clone, Debug, Default)]
pub struct ArgumentsView {
    /// Words masked in the result ([`echo::argument_words`]); empty with `argument_echo`
    /// off.
    pub words: Vec<String>,
    /// Whether the call changes state.
    pub effect: Option<CommandEffect>,
    /// The command of a shell tool.
    pub command: Option<String>,
    /// SimHash of the arguments (the command, for a shell tool), when asked for.
    pub near: Option<u32>,
    /// Shape of the arguments ([`signature::shape`]) of a call that changes state (0
    /// otherwise).
    pub shape: u16,
}

/// A result (or error message) as compared.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResultView<'a> {
    /// The text after the volatile patterns and argument masking.
    pub text: Cow<'a, str>,
    /// Volatile patterns changed it.
    pub noise: bool,
}

/// The arguments as text: a text, UTF-8 bytes, or a structured value that is a string.
fn text_of_arguments(arguments: Option<&Payload>) -> Option<Cow<'_, str>> {
    match arguments {
        Some(Payload::Text(text)) => Some(Cow::Borrowed(text.as_str())),
        Some(Payload::Bytes(bytes)) => std::str::from_utf8(bytes).ok().map(Cow::Borrowed),
        Some(Payload::Json(value)) if !value.is_object() && !value.is_array() => {
            value.as_str().map(|s| Cow::Owned(s.to_string()))
        }
        _ => None,
    }
}

impl Comparer {
    pub fn new(config: &CompareConfig) -> Comparer {
        Comparer {
            builtin: config
                .builtin_volatile_patterns
                .then(volatile::PatternSet::shared_builtin),
            config: config.clone(),
            near_signatures: false,
        }
    }

    /// The settings this comparer applies.
    pub fn config(&self) -> &CompareConfig {
        &self.config
    }

    /// True when `tool_name` runs shell commands (config `shell`, else its name).
    pub fn is_shell(&self, tool_name: &str, tool: Option<&ToolCompare>) -> bool {
        tool.and_then(|t| t.shell)
            .unwrap_or_else(|| mutation::name_is_shell(tool_name))
    }

    /// Reads the arguments (`None` when not captured).
    pub fn arguments(
        &self,
        tool_name: &str,
        arguments: Option<&Payload>,
        tool: Option<&ToolCompare>,
    ) -> ArgumentsView {
        let mut view = self.arguments_without_words(tool_name, arguments, tool);
        view.words = self.argument_words(arguments);
        view
    }

    /// The words of the arguments masked in a result ([`ArgumentsView::words`]): only a
    /// plain-text result or an error message needs them, so the engine asks for them then.
    pub fn argument_words(&self, arguments: Option<&Payload>) -> Vec<String> {
        match (
            self.config.argument_echo,
            text_of_arguments(arguments),
            arguments,
        ) {
            (false, _, _) => Vec::new(),
            (true, Some(text), _) => echo::argument_words(&text),
            (true, None, Some(Payload::Json(value))) => echo::value_words(value),
            (true, None, _) => Vec::new(),
        }
    }

    /// [`Comparer::arguments`] with [`ArgumentsView::words`] left empty.
    pub fn arguments_without_words(
        &self,
        tool_name: &str,
        arguments: Option<&Payload>,
        tool: Option<&ToolCompare>,
    ) -> ArgumentsView {
        self.arguments_of_class(tool_name, NameClass::of(tool_name), arguments, tool)
    }

    /// [`Comparer::arguments_without_words`] for a tool whose name's class is known
    /// (`class` is [`NameClass::of`] `tool_name`, read once per name by the caller).
    pub fn arguments_of_class(
        &self,
        tool_name: &str,
        class: NameClass,
        arguments: Option<&Payload>,
        tool: Option<&ToolCompare>,
    ) -> ArgumentsView {
        let text = text_of_arguments(arguments);
        let shell = tool.and_then(|t| t.shell).unwrap_or(class.shell);
        let command = match (shell, &text, arguments) {
            (false, _, _) => None,
            (true, Some(text), _) => shell::command_of(text).map(Cow::into_owned),
            (true, None, Some(Payload::Json(value))) => shell::command_of_value(value),
            (true, None, _) => None,
        };
        let effect = match tool.and_then(|t| t.mutating) {
            Some(true) => Some(CommandEffect::Writes),
            Some(false) => Some(CommandEffect::Reads),
            None if !self.config.mutation_heuristics => None,
            None => match &command {
                Some(command) => Some(shell::classify(command)),
                None if shell => None,
                None => Some(if class.mutates {
                    CommandEffect::Writes
                } else {
                    CommandEffect::Reads
                }),
            },
        };
        let compared: Option<Cow<str>> = match (&command, &text, arguments) {
            (Some(command), _, _) => Some(Cow::Borrowed(command.as_str())),
            (None, Some(text), _) => Some(Cow::Borrowed(text.as_ref())),
            (None, None, Some(Payload::Json(value))) => Some(Cow::Owned(json_text(value))),
            _ => None,
        };
        let near = match (&compared, self.near_signatures) {
            (Some(text), true) => Some(signature::simhash_of(&[tool_name, text])),
            _ => None,
        };
        let shape = match (&compared, effect) {
            (Some(text), Some(CommandEffect::Writes | CommandEffect::Moves)) => {
                signature::shape(tool_name, text)
            }
            _ => 0,
        };
        ArgumentsView {
            words: Vec::new(),
            effect,
            command,
            near,
            shape,
        }
    }

    /// The arguments' text to fingerprint: the tool's `arguments_volatile_patterns` applied,
    /// and a shell tool's command in normal form with `shell_normalise` (the other keys
    /// kept); borrowed when neither changes it.
    pub fn argument_text<'a>(
        &self,
        tool_name: &str,
        text: &'a str,
        tool: Option<&ToolCompare>,
    ) -> Cow<'a, str> {
        let mut out = match tool.and_then(|t| t.argument_patterns.as_ref()) {
            Some(patterns) => patterns.apply(text),
            None => Cow::Borrowed(text),
        };
        if self.config.shell_normalise && self.is_shell(tool_name, tool) {
            if let Some(normal) = normalised_command(&out) {
                out = Cow::Owned(normal);
            }
        }
        out
    }

    /// The comparison form of a plain-text result or error message.
    pub fn result<'a>(
        &self,
        text: &'a str,
        words: &[String],
        tool: Option<&ToolCompare>,
    ) -> ResultView<'a> {
        let mut out = match &self.builtin {
            Some(patterns) => patterns.apply(text),
            None => Cow::Borrowed(text),
        };
        if let Some(patterns) = tool.and_then(|t| t.result_patterns.as_ref()) {
            if let Cow::Owned(changed) = patterns.apply(&out) {
                out = Cow::Owned(changed);
            }
        }
        let noise = matches!(out, Cow::Owned(_));
        if !words.is_empty() {
            if let Cow::Owned(masked) = echo::mask(&out, words) {
                out = Cow::Owned(masked);
            }
        }
        ResultView { text: out, noise }
    }

    /// True when `text` (a compared result) counts as an outcome: at least
    /// `min_outcome_letters` letters outside markup, and, for a call that writes, an error
    /// or a result that reads as a failure. For JSON see [`Comparer::is_json_outcome`].
    pub fn is_outcome(&self, text: &str, error: bool, effect: Option<CommandEffect>) -> bool {
        let min = self.config.min_outcome_letters;
        let says_something = error && !text.trim().is_empty() || echo::letters(text, min) >= min;
        says_something && (error || effect != Some(CommandEffect::Writes) || is_failure(text))
    }
}

impl Comparer {
    /// [`Comparer::is_outcome`] of a JSON result (text or structured): its letters are those
    /// of its string values (keys are structure: `{"status":"success","data":[]}` says
    /// one word).
    pub fn is_json_outcome(&self, json: &str, effect: Option<CommandEffect>) -> bool {
        let min = self.config.min_outcome_letters;
        let mut letters = 0;
        json_scan::each_value(json, |value| {
            letters += echo::letters(&value, min - letters.min(min));
            letters < min
        });
        letters >= min && (effect != Some(CommandEffect::Writes) || is_failure(json))
    }

    /// [`Comparer::is_json_outcome`] of `value` serialised, read from the value itself: its
    /// string values in the order they serialise, the text written only for a write's
    /// failure check.
    pub fn is_value_outcome(
        &self,
        value: &serde_json::Value,
        effect: Option<CommandEffect>,
    ) -> bool {
        let min = self.config.min_outcome_letters;
        let mut letters = 0;
        each_string_value(value, &mut |text| {
            letters += echo::letters(text, min - letters.min(min));
            letters < min
        });
        letters >= min && (effect != Some(CommandEffect::Writes) || is_failure(&json_text(value)))
    }
}

/// Calls `f` with each string value of `value` (keys left out) in serialisation order,
/// until it returns false; false when it did.
fn each_string_value(value: &serde_json::Value, f: &mut impl FnMut(&str) -> bool) -> bool {
    match value {
        serde_json::Value::String(text) => f(text),
        serde_json::Value::Array(items) => items.iter().all(|item| each_string_value(item, f)),
        serde_json::Value::Object(members) => {
            members.values().all(|member| each_string_value(member, f))
        }
        _ => true,
    }
}

/// `value` as compact JSON text (what its `Display` writes), written straight into bytes
/// rather than through a formatter (serialising a `Value` cannot fail: its keys are strings).
fn json_text(value: &serde_json::Value) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// A shell tool's arguments with the command in normal form: the text itself when it is the
/// command, else the JSON with the command key's value replaced; `None` when no command.
fn normalised_command(text: &str) -> Option<String> {
    let trimmed = text.trim_start();
    if !trimmed.starts_with('{') {
        return Some(shell::normalise(text));
    }
    let mut value: serde_json::Value = serde_json::from_str(trimmed).ok()?;
    let object = value.as_object_mut()?;
    for key in ["command", "cmd", "script", "commands", "code", "input"] {
        if let Some(serde_json::Value::String(command)) = object.get_mut(key) {
            *command = shell::normalise(command);
            return Some(value.to_string());
        }
    }
    None
}

/// Bytes at the start of a result read by [`is_failure`]: a failure says so first; further
/// in, the words are data (a file shown after an edit holds `throws Exception`).
pub const FAILURE_PREFIX: usize = 240;

/// True when a result reads as a failure: an error word in its first [`FAILURE_PREFIX`]
/// bytes:
/// error, failed, not found, no such, invalid, cannot, unable, denied, exception,
/// traceback, usage:, syntax, unexpected, missing, unknown, not allowed, rejected, timed out.
pub fn is_failure(text: &str) -> bool {
    static FAILURE: OnceLock<Regex> = OnceLock::new();
    let regex = FAILURE.get_or_init(|| {
        Regex::new(
            r"(?i)\b(?:error|errors|fail|failed|failure|not found|no such|invalid|cannot|can't|unable|denied|refused|exception|traceback|usage:|syntax|unexpected|missing|unknown|not allowed|forbidden|rejected|timed out)\b",
        )
        .expect("failure regex compiles")
    });
    let mut end = text.len().min(FAILURE_PREFIX);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    regex.is_match(&text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// JSON values whose strings are error words, short words, quotes and backslashes.
    fn json_value() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        use serde_json::Value;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-1000i64..1000).prop_map(Value::from),
            "(error|failed|ok|Not found|[a-z \"\\\\\u{e9}\u{1F600}]{0,12})".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-z_]{1,6}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        #[test]
        fn a_value_is_an_outcome_as_its_text_is(value in json_value(), writes in proptest::bool::ANY) {
            let comparer = Comparer::default();
            let text = value.to_string();
            proptest::prop_assert_eq!(json_text(&value), text.clone());
            let effect = if writes { CommandEffect::Writes } else { CommandEffect::Reads };
            for effect in [Some(effect), None] {
                proptest::prop_assert_eq!(
                    comparer.is_value_outcome(&value, effect),
                    comparer.is_json_outcome(&text, effect)
                );
            }
        }
    }

    #[test]
    fn every_comparer_shares_one_compiled_builtin_set() {
        let (a, b) = (Comparer::default(), Comparer::default());
        let (a, b) = (a.builtin.expect("on by default"), b.builtin.expect("on"));
        assert!(Arc::ptr_eq(&a, &b));
        let off = Comparer::new(&CompareConfig {
            builtin_volatile_patterns: false,
            ..CompareConfig::default()
        });
        assert!(off.builtin.is_none());
        // the shared set is the built-in one
        assert_eq!(
            a.apply("took 1234 ms"),
            PatternSet::builtin().apply("took 1234 ms")
        );
        assert_ne!(a.apply("took 1234 ms"), "took 1234 ms");
    }

    #[test]
    fn results_lose_noise_and_echoed_arguments() {
        let c = Comparer::default();
        let text = |t: &str| Payload::Text(t.to_string());
        let a = c.arguments("bash", Some(&text(r#"{"command": "cd fastjson/"}"#)), None);
        let b = c.arguments(
            "bash",
            Some(&text(r#"{"command": "cd  fastjson2/"}"#)),
            None,
        );
        let ra = c.result(
            "/bin/bash: line 13008: cd: fastjson/: No such file",
            &a.words,
            None,
        );
        let rb = c.result(
            "/bin/bash: line 13023: cd: fastjson2/: No such file",
            &b.words,
            None,
        );
        assert_eq!(ra.text, rb.text);
        assert!(ra.noise);
        assert_eq!(a.effect, Some(CommandEffect::Moves));
        assert!(c.is_outcome(&ra.text, false, a.effect));
        let plain = c.result("No matches found", &[], None);
        assert!(matches!(plain.text, Cow::Borrowed(_)) && !plain.noise);
    }

    #[test]
    fn outcomes_need_letters_and_writes_need_a_failure() {
        let c = Comparer::default();
        assert!(!c.is_outcome(
            "<returncode>0</returncode>\n<output>\n</output>",
            false,
            None
        ));
        assert!(!c.is_outcome("OK", false, None));
        assert!(c.is_outcome("boom", true, None));
        let writes = Some(CommandEffect::Writes);
        assert!(!c.is_outcome("File updated successfully, all good", false, writes));
        assert!(c.is_outcome("Error: the edit introduced a syntax error", false, writes));
        assert!(!c.is_json_outcome(r#"{"status":"success","data":[]}"#, None));
        assert!(c.is_json_outcome(r#"{"error": "Reservation not found"}"#, None));
    }

    #[test]
    fn effects_by_name_command_and_config() {
        let c = Comparer::default();
        let effect = |tool: &str, args: &str| {
            c.arguments(tool, Some(&Payload::Text(args.into())), None)
                .effect
        };
        assert_eq!(effect("edit", "edit 1:1"), Some(CommandEffect::Writes));
        assert_eq!(effect("open", "open a.java"), Some(CommandEffect::Reads));
        assert_eq!(
            effect("bash", r#"{"command": "sed -i s/a/b/ f"}"#),
            Some(CommandEffect::Writes)
        );
        assert_eq!(
            effect("bash", r#"{"command": "pytest"}"#),
            Some(CommandEffect::Reads)
        );
        let config = ToolCompare {
            mutating: Some(true),
            ..ToolCompare::default()
        };
        let empty = Payload::Text("{}".into());
        assert_eq!(
            c.arguments("poll", Some(&empty), Some(&config)).effect,
            Some(CommandEffect::Writes)
        );
        let structured = Payload::Json(serde_json::json!({"command": "rm -rf build"}));
        assert_eq!(
            c.arguments("bash", Some(&structured), None).effect,
            Some(CommandEffect::Writes)
        );
        let off = Comparer::new(&CompareConfig {
            mutation_heuristics: false,
            ..CompareConfig::default()
        });
        assert_eq!(
            off.arguments("edit", Some(&Payload::Text("x".into())), None)
                .effect,
            None
        );
    }

    #[test]
    fn shell_arguments_in_normal_form_only_when_asked() {
        let on = Comparer::new(&CompareConfig {
            shell_normalise: true,
            ..CompareConfig::default()
        });
        let args = r#"{"command": "cd /repo &&  pytest  -x", "timeout": 30}"#;
        let normal = on.argument_text("bash", args, None);
        assert_eq!(
            normal,
            on.argument_text("bash", r#"{"command":"pytest -x","timeout":30}"#, None)
        );
        let off = Comparer::default();
        assert!(matches!(
            off.argument_text("bash", args, None),
            Cow::Borrowed(_)
        ));
    }
}
