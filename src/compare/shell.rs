//! Shell commands as loop detection reads them: the command of a shell tool's arguments, a
//! small POSIX-style lexer (quotes, escapes, operators, redirections, comments; no
//! expansion), a normal form for comparing commands, and whether a command changes state.
//!
//! Everything here is a heuristic over the command text: nothing is executed or resolved.

use std::borrow::Cow;

/// Argument keys that hold a shell tool's command, tried in this order.
const COMMAND_KEYS: &[&str] = &["command", "cmd", "script", "commands", "code", "input"];

/// The command of a shell tool's arguments: the text itself when it is not a JSON object;
/// else the string under the first of [`COMMAND_KEYS`] present (the strings of an array
/// under it joined with spaces: `["bash", "-lc", "ls"]`); `None` when no such key holds one.
pub fn command_of(arguments: &str) -> Option<Cow<'_, str>> {
    let trimmed = arguments.trim_start();
    if !trimmed.starts_with('{') {
        return Some(Cow::Borrowed(arguments));
    }
    let values = super::json_scan::string_values(trimmed);
    for key in COMMAND_KEYS {
        let mut under = values
            .iter()
            .filter(|v| v.key.as_deref() == Some(*key))
            .map(|v| &v.value);
        let Some(first) = under.next() else {
            continue;
        };
        let rest: Vec<&Cow<str>> = under.collect();
        if rest.is_empty() {
            return Some(Cow::Owned(first.to_string()));
        }
        let mut joined = first.to_string();
        for word in rest {
            joined.push(' ');
            joined.push_str(word);
        }
        return Some(Cow::Owned(joined));
    }
    None
}

/// The command of structured arguments (an object), as [`command_of`] reads text.
pub fn command_of_value(value: &serde_json::Value) -> Option<String> {
    let object = value.as_object()?;
    for key in COMMAND_KEYS {
        match object.get(*key) {
            Some(serde_json::Value::String(s)) => return Some(s.clone()),
            Some(serde_json::Value::Array(items)) => {
                let words: Option<Vec<&str>> = items.iter().map(|v| v.as_str()).collect();
                if let Some(words) = words {
                    return Some(words.join(" "));
                }
            }
            _ => {}
        }
    }
    None
}

/// A lexed token: a word (quotes removed) or an operator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Token {
    Word(String),
    /// `&&`, `||`, `;`, `|`, `&`, a newline (`"\n"`), `(`, `)`.
    Op(&'static str),
    /// An output redirection (`>`, `>>`, `N>`, `&>`) to the target that follows it; `None`
    /// for a duplication such as `2>&1`.
    RedirectOut(Option<String>),
    /// `<`, `<<`, `<<<` and their source word (here-document bodies are not separated from
    /// the text: they are words of the following lines).
    RedirectIn,
}

/// Splits `command` into tokens. Unbalanced quotes end at the end of the text.
pub fn lex(command: &str) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    // The delimiter of a here-document whose body starts after the next newline.
    let mut heredoc: Option<String> = None;
    let mut chars = command.chars().peekable();
    let flush = |tokens: &mut Vec<Token>, word: &mut String, in_word: &mut bool| {
        if *in_word {
            tokens.push(Token::Word(std::mem::take(word)));
            *in_word = false;
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                for c in chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                    word.push(c);
                }
            }
            '"' => {
                in_word = true;
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' if matches!(chars.peek(), Some('"' | '\\' | '$' | '`')) => {
                            word.extend(chars.next());
                        }
                        _ => word.push(c),
                    }
                }
            }
            '\\' => {
                match chars.next() {
                    Some('\n') | None => {} // line continuation
                    Some(c) => {
                        in_word = true;
                        word.push(c);
                    }
                }
            }
            '#' if !in_word => {
                while chars.peek().is_some_and(|&c| c != '\n') {
                    chars.next();
                }
            }
            ' ' | '\t' | '\r' => flush(&mut tokens, &mut word, &mut in_word),
            '\n' | ';' | '(' | ')' => {
                flush(&mut tokens, &mut word, &mut in_word);
                if c == '\n' {
                    if let Some(end) = heredoc.take() {
                        skip_heredoc_body(&mut chars, &end);
                    }
                }
                tokens.push(Token::Op(match c {
                    '\n' => "\n",
                    ';' => ";",
                    '(' => "(",
                    _ => ")",
                }));
            }
            '&' | '|' => {
                if c == '&' && chars.peek() == Some(&'>') {
                    // `&>file`: both streams to a file
                    chars.next();
                    flush(&mut tokens, &mut word, &mut in_word);
                    if chars.peek() == Some(&'>') {
                        chars.next();
                    }
                    tokens.push(redirect_target(&mut chars));
                    continue;
                }
                flush(&mut tokens, &mut word, &mut in_word);
                let double = chars.peek() == Some(&c);
                if double {
                    chars.next();
                }
                tokens.push(Token::Op(match (c, double) {
                    ('&', true) => "&&",
                    ('&', false) => "&",
                    ('|', true) => "||",
                    _ => "|",
                }));
            }
            '>' => {
                // `2>`: the word so far is a file descriptor, not a word
                if in_word && !word.is_empty() && word.chars().all(|c| c.is_ascii_digit()) {
                    word.clear();
                    in_word = false;
                }
                flush(&mut tokens, &mut word, &mut in_word);
                if matches!(chars.peek(), Some('>' | '|')) {
                    chars.next();
                }
                tokens.push(redirect_target(&mut chars));
            }
            '<' => {
                flush(&mut tokens, &mut word, &mut in_word);
                let mut angles = 1;
                while chars.peek() == Some(&'<') {
                    chars.next();
                    angles += 1;
                }
                if angles == 2 {
                    if chars.peek() == Some(&'-') {
                        chars.next();
                    }
                    heredoc = Some(delimiter(&mut chars));
                    tokens.push(Token::RedirectIn);
                    tokens.push(Token::Word(String::new()));
                    continue;
                }
                tokens.push(Token::RedirectIn);
            }
            _ => {
                in_word = true;
                word.push(c);
            }
        }
    }
    flush(&mut tokens, &mut word, &mut in_word);
    tokens
}

/// The delimiter word after `<<` (quotes removed).
fn delimiter(chars: &mut std::iter::Peekable<std::str::Chars>) -> String {
    while matches!(chars.peek(), Some(' ' | '\t')) {
        chars.next();
    }
    let mut out = String::new();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() || matches!(c, ';' | '|' | '&' | '>' | '<' | '(' | ')') {
            break;
        }
        chars.next();
        if !matches!(c, '\'' | '"' | '\\') {
            out.push(c);
        }
    }
    out
}

/// Skips the lines of a here-document body up to and including the line `end` (leading
/// tabs allowed, as `<<-` strips them); to the end of the text when there is none.
fn skip_heredoc_body(chars: &mut std::iter::Peekable<std::str::Chars>, end: &str) {
    loop {
        let mut line = String::new();
        let mut ended = true;
        for c in chars.by_ref() {
            if c == '\n' {
                ended = false;
                break;
            }
            line.push(c);
        }
        if line.trim_start_matches('\t').trim_end() == end || ended {
            return;
        }
    }
}

/// After `>` / `>>`: `&N` (a duplication) or the target word.
fn redirect_target(chars: &mut std::iter::Peekable<std::str::Chars>) -> Token {
    while matches!(chars.peek(), Some(' ' | '\t')) {
        chars.next();
    }
    if chars.peek() == Some(&'&') {
        chars.next();
        while chars
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || *c == '-')
        {
            chars.next();
        }
        return Token::RedirectOut(None);
    }
    // The target is lexed as the next word; mark the redirection, the word follows.
    Token::RedirectOut(Some(String::new()))
}

/// The simple commands of `command`: their words, the redirection targets among them taken
/// out (`Some(target)` for each output redirection to a file).
pub fn simple_commands(command: &str) -> Vec<(Vec<String>, Vec<String>)> {
    let mut out = Vec::new();
    let mut words = Vec::new();
    let mut targets = Vec::new();
    let mut pending_target = false;
    let mut pending_source = false;
    for token in lex(command) {
        match token {
            Token::Word(w) if pending_target => {
                targets.push(w);
                pending_target = false;
            }
            Token::Word(_) if pending_source => pending_source = false,
            Token::Word(w) => words.push(w),
            Token::RedirectOut(Some(_)) => pending_target = true,
            Token::RedirectOut(None) => {}
            Token::RedirectIn => pending_source = true,
            Token::Op(_) => {
                if !words.is_empty() || !targets.is_empty() {
                    out.push((std::mem::take(&mut words), std::mem::take(&mut targets)));
                }
                pending_target = false;
                pending_source = false;
            }
        }
    }
    if !words.is_empty() || !targets.is_empty() {
        out.push((words, targets));
    }
    out
}

/// True when every quote of `text` is closed (backslash escapes outside single quotes
/// honoured): text with an open quote is prose or a broken command, not a command line.
pub fn quotes_balance(text: &str) -> bool {
    let mut open: Option<char> = None;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match (open, c) {
            (Some('\''), '\'') => open = None,
            (Some('\''), _) => {}
            (_, '\\') => {
                chars.next();
            }
            (Some('"'), '"') => open = None,
            (None, '\'' | '"') => open = Some(c),
            _ => {}
        }
    }
    open.is_none()
}

/// Words of `text` as a shell splits them (quotes removed, operators dropped).
pub fn words(text: &str) -> Vec<String> {
    lex(text)
        .into_iter()
        .filter_map(|t| match t {
            Token::Word(w) => Some(w),
            _ => None,
        })
        .collect()
}

/// The normal form of a command for comparison: tokens re-joined with single spaces
/// (whitespace, quoting and line continuations do not matter), and a leading `cd DIR &&` /
/// `cd DIR;` dropped (`cd /repo && pytest` is `pytest` run where the agent already is).
pub fn normalise(command: &str) -> String {
    let tokens = lex(command);
    let mut start = 0;
    if let [Token::Word(cd), Token::Word(_), Token::Op("&&" | ";" | "\n"), ..] = &tokens[..] {
        if cd == "cd" {
            start = 3;
        }
    }
    let mut out = String::new();
    for token in &tokens[start..] {
        if !out.is_empty() {
            out.push(' ');
        }
        match token {
            Token::Word(w) if w.is_empty() || w.contains(char::is_whitespace) => {
                out.push('\'');
                out.push_str(w);
                out.push('\'');
            }
            Token::Word(w) => out.push_str(w),
            Token::Op("\n") => out.push(';'),
            Token::Op(op) => out.push_str(op),
            Token::RedirectOut(Some(_)) => out.push('>'),
            Token::RedirectOut(None) => out.push_str(">&"),
            Token::RedirectIn => out.push('<'),
        }
    }
    out
}

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
    super::mutation::name_mutates(program)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_of_a_shell_tool() {
        assert_eq!(
            command_of(r#"{"command": "ls -F"}"#).as_deref(),
            Some("ls -F")
        );
        assert_eq!(
            command_of(r#"{"cmd": ["bash", "-lc", "ls"]}"#).as_deref(),
            Some("bash -lc ls")
        );
        assert_eq!(command_of("ls -la").as_deref(), Some("ls -la"));
        assert_eq!(command_of(r#"{"path": "a"}"#), None);
    }

    #[test]
    fn lexing_quotes_operators_and_redirections() {
        let words = |c: &str| words(c);
        assert_eq!(
            words(r#"grep -n "a b" 'c d' e\ f"#),
            ["grep", "-n", "a b", "c d", "e f"]
        );
        let cmds = simple_commands("cd /repo && python t.py 2>&1 | tee log.txt > /dev/null");
        assert_eq!(cmds.len(), 3);
        assert_eq!(cmds[0].0, ["cd", "/repo"]);
        assert_eq!(cmds[1].0, ["python", "t.py"]);
        assert!(cmds[1].1.is_empty(), "2>&1 is a duplication");
        assert_eq!(
            cmds[2],
            (
                vec!["tee".into(), "log.txt".into()],
                vec!["/dev/null".into()]
            )
        );
        assert_eq!(words("echo a # comment\nls"), ["echo", "a", "ls"]);
        // a here-document body is no command
        let cmds = simple_commands("cat <<'EOF' > t.py\nrm -rf /\nEOF\nls");
        assert_eq!(cmds.len(), 2, "{cmds:?}");
        assert_eq!(cmds[0].1, ["t.py"]);
        assert_eq!(cmds[1].0, ["ls"]);
    }

    #[test]
    fn quotes_balance_or_not() {
        assert!(quotes_balance(r#"grep "a b" 'c' d\'s"#));
        assert!(!quotes_balance("Let's try again"));
        assert!(!quotes_balance(r#"echo "open"#));
    }

    #[test]
    fn normal_forms_ignore_spacing_quoting_and_a_leading_cd() {
        assert_eq!(normalise("ls   -la\t'src'"), normalise("ls -la src"));
        assert_eq!(normalise("cd /repo && pytest -x"), normalise("pytest  -x"));
        assert_ne!(normalise("pytest -x"), normalise("pytest -q"));
        assert_eq!(normalise("grep 'a b' f"), "grep 'a b' f");
    }

    #[test]
    fn writes_are_recognised() {
        use CommandEffect::*;
        for command in [
            "sed -i 's/a/b/' f.py",
            "cat <<'EOF' > test.py\nprint(1)\nEOF",
            "echo x >> notes.txt",
            "git apply fix.patch",
            "git -C repo checkout main",
            "rm -rf build",
            "cd /testbed && sed -i.bak 's/x/y/' a.py && python t.py",
            "python -c \"open('x.py', 'w').write('1')\"",
            "python - <<EOF\nfrom pathlib import Path\nPath('a').write_text('b')\nEOF",
            "pip install -e .",
            "python -m pip install requests",
            "tar -xzf a.tgz",
            "echo hi | tee out.log",
            "edit 1:1",
            "export A=1",
        ] {
            assert_eq!(classify(command), Writes, "{command}");
        }
        for command in [
            "ls -F",
            "cat a.py",
            "grep -rn foo src 2>/dev/null",
            "python reproduce.py",
            "cd /testbed && python -m pytest tests/ -x 2>&1 | tail -20",
            "find / -name java 2>/dev/null",
            "git diff",
            "git status",
            "sed -n '1,20p' f.py",
            "python -c \"print(open('a').read())\"",
            "javac -cp .:lib Test.java",
            "perl -MList::Util -e 'print 1'",
            "cat <<EOF | python\nimport os\nprint(os.listdir('.'))\nEOF",
        ] {
            assert_eq!(classify(command), Reads, "{command}");
        }
        assert_eq!(classify("cd .."), Moves);
        assert_eq!(classify("cd src/\ncd main"), Moves);
    }
}
