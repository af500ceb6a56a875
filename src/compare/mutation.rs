//! Which tools change state, by their names: the words of a tool name (split at `_`, `-`,
//! `.`, `/`, spaces and lower→upper case changes) are looked up in two lists.
//!
//! A name with a word of [`MUTATING_WORDS`] mutates (`edit_file`, `str_replace_editor`,
//! `writeFile`, `book_reservation`, `git_commit`), unless it also has a word of
//! [`READING_WORDS`] and no mutating word comes before it (`get_update_status` reads). A
//! name with neither (`bash`, `calculator`) does not: a shell tool is classed by its
//! command ([`super::shell::classify`]), anything else by config (`mutating = true`).

/// Words that name a change of state.
pub const MUTATING_WORDS: &[&str] = &[
    "edit",
    "write",
    "patch",
    "replace",
    "apply",
    "create",
    "delete",
    "remove",
    "insert",
    "move",
    "rename",
    "rm",
    "mv",
    "cp",
    "copy",
    "mkdir",
    "touch",
    "update",
    "set",
    "save",
    "append",
    "modify",
    "overwrite",
    "commit",
    "install",
    "upload",
    "put",
    "post",
    "submit",
    "book",
    "cancel",
    "send",
    "transfer",
    "drop",
    "truncate",
    "add",
    "undo",
    "revert",
];

/// Words that name a read.
pub const READING_WORDS: &[&str] = &[
    "get",
    "read",
    "list",
    "search",
    "find",
    "view",
    "show",
    "open",
    "fetch",
    "query",
    "check",
    "describe",
    "cat",
    "ls",
    "grep",
    "scroll",
    "goto",
    "lookup",
    "look",
    "inspect",
    "status",
    "diff",
    "info",
    "count",
    "calculate",
    "think",
];

/// The lower-case words of a tool name.
pub fn name_words(name: &str) -> impl Iterator<Item = String> + '_ {
    let mut words = Vec::new();
    let mut current = String::new();
    let mut previous_lower = false;
    for c in name.chars() {
        if !c.is_alphanumeric() {
            if !current.is_empty() {
                words.push(std::mem::take(&mut current));
            }
            previous_lower = false;
            continue;
        }
        if c.is_uppercase() && previous_lower && !current.is_empty() {
            words.push(std::mem::take(&mut current));
        }
        previous_lower = c.is_lowercase() || c.is_ascii_digit();
        current.extend(c.to_lowercase());
    }
    if !current.is_empty() {
        words.push(current);
    }
    words.into_iter()
}

/// True when the tool name says it changes state (see the module docs).
pub fn name_mutates(name: &str) -> bool {
    for word in name_words(name) {
        if MUTATING_WORDS.contains(&word.as_str()) {
            return true;
        }
        if READING_WORDS.contains(&word.as_str()) {
            return false;
        }
    }
    false
}

/// What a tool's name says of it: [`name_is_shell`] and [`name_mutates`], read once per
/// distinct name (the engine keeps it beside the interned name) instead of once per call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NameClass {
    /// The name says the tool runs shell commands ([`name_is_shell`]).
    pub shell: bool,
    /// The name says the tool changes state ([`name_mutates`]).
    pub mutates: bool,
}

impl NameClass {
    /// The class of `name`.
    pub fn of(name: &str) -> NameClass {
        NameClass {
            shell: name_is_shell(name),
            mutates: name_mutates(name),
        }
    }
}

/// Tool names that run shell commands: a name word `bash`, `shell`, `sh`, `zsh`,
/// `terminal`, `powershell`, `pwsh`, `cmd`, `command(s)` or `exec` (`run_command`,
/// `execute_bash`, `local_shell`, `container.exec`).
pub fn name_is_shell(name: &str) -> bool {
    const SHELL_WORDS: &[&str] = &[
        "bash",
        "shell",
        "sh",
        "zsh",
        "terminal",
        "powershell",
        "pwsh",
        "cmd",
        "command",
        "commands",
        "exec",
    ];
    name_words(name).any(|w| SHELL_WORDS.contains(&w.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_split_into_words() {
        let words: Vec<String> = name_words("str_replace_basedEditTool-v2").collect();
        assert_eq!(words, ["str", "replace", "based", "edit", "tool", "v2"]);
    }

    #[test]
    fn mutating_names() {
        for name in [
            "edit",
            "create",
            "write_file",
            "str_replace_based_edit_tool",
            "applyPatch",
            "book_reservation",
            "update_reservation_flights",
            "cancel_reservation",
            "git_commit",
            "submit",
            "delete_record",
        ] {
            assert!(name_mutates(name), "{name}");
        }
        for name in [
            "bash",
            "open",
            "goto",
            "scroll_down",
            "search_dir",
            "find_file",
            "read_file",
            "get_user_details",
            "get_update_status",
            "list_all_airports",
            "calculate",
            "web_search",
        ] {
            assert!(!name_mutates(name), "{name}");
        }
    }

    #[test]
    fn shell_names() {
        for name in [
            "bash",
            "run_shell_command",
            "execute_command",
            "local_shell",
            "Terminal",
        ] {
            assert!(name_is_shell(name), "{name}");
        }
        for name in ["read_file", "search", "edit", "run_tests"] {
            assert!(!name_is_shell(name), "{name}");
        }
    }
}
