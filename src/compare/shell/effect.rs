//! Whether a shell command changes state: files written, the session moved or changed
//! (read from the text of the command alone, [`super::simple_commands`]).

use super::simple_commands;

/// Programs whose run changes files or the session whatever their arguments.
const WRITERS: &[&str] = &[
    "rm", "rmdir", "mv", "cp", "mkdir", "touch", "ln", "chmod", "chown", "chgrp", "truncate", "dd",
    "install", "patch", "unzip", "rsync", "shred", "mkfifo",
];

/// Programs that only move the session (`cd ..`): a change of state whose effect is never
/// in the result. Counted only when the whole command is such moves.
const NAVIGATION: &[&str] = &["cd", "pushd", "popd"];

/// Session state: the environment and sourced scripts.
const SESSION: &[&str] = &["export", "unset", "source", ".", "alias"];

/// Words that run the command after them (skipped to find the program).
const WRAPPERS: &[&str] = &[
    "sudo", "env", "time", "nohup", "nice", "command", "exec", "builtin", "xargs", "stdbuf",
];

/// git subcommands that change the work tree, the index or refs.
const GIT_WRITES: &[&str] = &[
    "add",
    "am",
    "apply",
    "checkout",
    "cherry-pick",
    "clean",
    "clone",
    "commit",
    "init",
    "merge",
    "mv",
    "pull",
    "rebase",
    "reset",
    "restore",
    "revert",
    "rm",
    "stash",
    "switch",
];

/// Package managers and the subcommands of theirs that install or remove.
const PACKAGE_MANAGERS: &[&str] = &[
    "pip", "pip3", "npm", "yarn", "pnpm", "cargo", "apt", "apt-get", "conda", "poetry", "uv",
    "gem", "go", "brew", "dnf", "yum", "apk",
];
const PACKAGE_WRITES: &[&str] = &[
    "install",
    "uninstall",
    "remove",
    "add",
    "i",
    "update",
    "upgrade",
    "get",
];

/// Interpreters whose inline code (`-c`, `-e`, a here-document) is read for file writes.
const INTERPRETERS: &[&str] = &[
    "python", "python3", "python2", "node", "ruby", "perl", "php", "bash", "sh", "zsh",
];

/// What a command does to state, by [`classify`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommandEffect {
    /// Reads only, as far as the analysis sees.
    Reads,
    /// Writes files or changes the session (an edit, a redirection, `git apply`, …).
    Writes,
    /// Only moves the session's working directory (`cd ..`).
    Moves,
}

/// Whether `command` changes state, conservatively: a command is read-only unless one of
/// its simple commands writes: an output redirection to a file (not `/dev/null`, not a
/// duplication), a [`WRITERS`] program, `sed -i` / `perl -i`, `tee FILE`, a git subcommand
/// in [`GIT_WRITES`], a package manager's install/remove, `tar` creating or extracting, an
/// interpreter whose inline code writes files (`open(…, 'w')`, `.write_text(`, `fs.writeFile`,
/// `os.remove`, `shutil.`…), a session change ([`SESSION`]); or a program word that names
/// a state change by the tool-name rules (`edit`, `create`, `submit`…; SWE-agent's commands
/// typed into a shell). `cd`/`pushd`/`popd` alone are [`CommandEffect::Moves`]; as the
/// prefix of another command they change nothing the analysis counts.
pub fn classify(command: &str) -> CommandEffect {
    let commands = simple_commands(command);
    let mut moves = false;
    for (words, targets) in &commands {
        if targets.iter().any(|t| !is_null_target(t)) {
            return CommandEffect::Writes;
        }
        let Some(at) = program_at(words) else {
            continue;
        };
        let program = basename(&words[at]);
        let args = &words[at + 1..];
        if NAVIGATION.contains(&program) {
            moves = true;
            continue;
        }
        if writes(program, args, command) {
            return CommandEffect::Writes;
        }
    }
    let only_moves = commands.iter().all(|(words, _)| {
        program_at(words).is_none_or(|at| NAVIGATION.contains(&basename(&words[at])))
    });
    if moves && only_moves {
        CommandEffect::Moves
    } else {
        CommandEffect::Reads
    }
}

fn is_null_target(target: &str) -> bool {
    matches!(
        target,
        "/dev/null" | "/dev/stdout" | "/dev/stderr" | "/dev/tty" | ""
    )
}

/// Index of the program word: after variable assignments and [`WRAPPERS`] (and their
/// options; `timeout DURATION`).
fn program_at(words: &[String]) -> Option<usize> {
    let mut i = 0;
    while i < words.len() {
        let w = words[i].as_str();
        let assignment = w
            .split_once('=')
            .is_some_and(|(name, _)| is_identifier(name));
        if assignment || w.starts_with('-') && i > 0 || WRAPPERS.contains(&basename(w)) {
            i += 1;
        } else if basename(w) == "timeout" {
            i += 2;
        } else {
            return Some(i);
        }
    }
    None
}

fn is_identifier(name: &str) -> bool {
    !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit())
}

fn basename(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

/// True when `program` with `args` writes (see [`classify`]); `command` is the whole text,
/// read for an interpreter's inline code (a here-document body is not one of its words).
fn writes(program: &str, args: &[String], command: &str) -> bool {
    let has = |pred: &dyn Fn(&str) -> bool| args.iter().any(|a| pred(a));
    if WRITERS.contains(&program) || SESSION.contains(&program) {
        return true;
    }
    match program {
        "sed" | "perl" => {
            let in_place = |a: &str| {
                let flags = a.strip_prefix('-').filter(|f| !f.starts_with('-'));
                let flags = flags.map(|f| f.split('.').next().unwrap_or(f));
                a == "--in-place"
                    || a.starts_with("--in-place=")
                    || flags.is_some_and(|f| {
                        f.chars().all(|c| c.is_ascii_alphabetic()) && f.contains('i')
                    })
            };
            if has(&in_place) {
                return true;
            }
        }
        "tee" => return has(&|a| !a.starts_with('-') && !is_null_target(a)),
        "git" => {
            let sub = args.iter().enumerate().find(|(i, a)| {
                !a.starts_with('-') && (*i == 0 || !matches!(args[i - 1].as_str(), "-C" | "-c"))
            });
            return sub.is_some_and(|(_, s)| GIT_WRITES.contains(&s.as_str()));
        }
        "tar" => {
            let mode = args.first().map(String::as_str).unwrap_or("");
            let flags = mode.trim_start_matches('-');
            return (!mode.starts_with("--") && (flags.contains('x') || flags.contains('c')))
                || has(&|a| matches!(a, "--extract" | "--create" | "--append"));
        }
        _ => {}
    }
    if PACKAGE_MANAGERS.contains(&program) {
        return args
            .iter()
            .find(|a| !a.starts_with('-'))
            .is_some_and(|s| PACKAGE_WRITES.contains(&s.as_str()));
    }
    let versioned = program.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    if INTERPRETERS.contains(&program) || INTERPRETERS.contains(&versioned) {
        let inline = has(&|a| matches!(a, "-c" | "-e" | "-")) || command.contains("<<");
        let module_install = args
            .windows(3)
            .any(|w| w[0] == "-m" && w[1] == "pip" && PACKAGE_WRITES.contains(&w[2].as_str()));
        return module_install || inline && code_writes(command);
    }
    crate::compare::mutation::name_mutates(program)
}

/// Inline code that writes or removes files (Python, Node, Ruby, Perl idioms).
fn code_writes(code: &str) -> bool {
    const MARKERS: &[&str] = &[
        ".write(",
        ".write_text(",
        ".write_bytes(",
        ".writelines(",
        "writeFile",
        "appendFile",
        "os.remove(",
        "os.unlink(",
        "os.rename(",
        "os.replace(",
        "os.makedirs(",
        "os.mkdir(",
        "shutil.",
        ".unlink(",
        ".mkdir(",
        "File.write(",
    ];
    if MARKERS.iter().any(|m| code.contains(m)) {
        return true;
    }
    // open(path, 'w' / 'a' / 'x' / '+')
    let mut rest = code;
    while let Some(at) = rest.find("open(") {
        rest = &rest[at + 5..];
        let call = &rest[..rest.find(')').unwrap_or(rest.len())];
        if let Some((_, mode)) = call.rsplit_once(',') {
            let mode = mode.trim().trim_start_matches("mode=");
            if mode.starts_with(['\'', '"']) && mode[1..].starts_with(['w', 'a', 'x'])
                || mode.contains('+')
            {
                return true;
            }
        }
    }
    false
}
