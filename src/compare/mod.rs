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
mod outcome;
pub mod shell;
pub mod signature;
pub mod volatile;

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::conventions::event::Payload;
pub use mutation::NameClass;
use outcome::json_text;
pub use outcome::{is_failure, FAILURE_PREFIX};
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
    /// Compute the arguments' SimHash (for `near_repeat`): set by the engine from its
    /// profiles, at start and at each reload ([`Comparer::set_near_signatures`]); shared by
    /// the clones of this comparer.
    near_signatures: Arc<AtomicBool>,
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
            near_signatures: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Turns the arguments' SimHash on or off (on while some profile uses `near_repeat`).
    /// Calls read while it is off carry no SimHash, so they take part in no near repeat: a
    /// reload that turns the rule on counts near repeats from its own calls on.
    pub fn set_near_signatures(&self, on: bool) {
        self.near_signatures.store(on, Ordering::Relaxed);
    }

    /// True while the arguments' SimHash is computed ([`Comparer::set_near_signatures`]).
    pub fn near_signatures(&self) -> bool {
        self.near_signatures.load(Ordering::Relaxed)
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
        let near = match (&compared, self.near_signatures()) {
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

    /// The comparison form of a plain-text result (`error` false) or an error message
    /// (`error` true): without its volatile noise (the built-in patterns, then the tool's
    /// `result_volatile_patterns`) and without the call's argument `words` it echoes.
    ///
    /// A successful result that does not read as a failure ([`is_failure`]) keeps its
    /// identifiers (UUIDs, request ids: [`volatile::IDENTIFIER_PATTERNS`]) and the argument
    /// words it echoes. Across different arguments those are the answer: "Email queued with
    /// id <uuid>" for eight recipients is eight emails, "User alice is active" and "User bob
    /// is active" two answers, and masking them made such bulk work read as one outcome
    /// repeated (`near_repeat`, `repeated_outcome`). An error, or a result that reads as a
    /// failure ("alice: not found", "request id 7f…: rate limited"), is masked whole: the
    /// same failure whatever the arguments is a loop. Counters, times, paths and the other
    /// patterns are noise either way.
    pub fn result<'a>(
        &self,
        text: &'a str,
        words: &[String],
        tool: Option<&ToolCompare>,
        error: bool,
    ) -> ResultView<'a> {
        // The form without noise: the built-in patterns (bar the identifiers when asked),
        // then the tool's; and whether an identifier pattern was left out that matched.
        let denoised = |keep_identifiers: bool| {
            let (mut out, refused) = match &self.builtin {
                Some(patterns) => patterns.apply_where(text, |i| {
                    !keep_identifiers || !volatile::is_identifier_pattern(i)
                }),
                None => (Cow::Borrowed(text), false),
            };
            if let Some(patterns) = tool.and_then(|t| t.result_patterns.as_ref()) {
                if let Cow::Owned(changed) = patterns.apply(&out) {
                    out = Cow::Owned(changed);
                }
            }
            (out, refused)
        };
        let echo_masked = |out: &str| match echo::mask(out, words) {
            Cow::Owned(masked) => Some(masked),
            Cow::Borrowed(_) => None,
        };
        let (mut out, refused) = denoised(!error);
        let mut masked = echo_masked(&out);
        // Read as a failure only when masking would change the form (the check is a regex).
        let whole = error || ((refused || masked.is_some()) && is_failure(text));
        if whole && refused {
            out = denoised(false).0;
            masked = echo_masked(&out);
        }
        let noise = matches!(out, Cow::Owned(_));
        if let (true, Some(masked)) = (whole, masked) {
            out = Cow::Owned(masked);
        }
        ResultView { text: out, noise }
    }
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

#[cfg(test)]
mod tests;
