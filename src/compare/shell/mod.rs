//! Shell commands as loop detection reads them: the command of a shell tool's arguments, a
//! small POSIX-style lexer (quotes, escapes, operators, redirections, comments; no
//! expansion), a normal form for comparing commands, and whether a command changes state.
//!
//! Everything here is a heuristic over the command text: nothing is executed or resolved.

mod effect;
#[cfg(test)]
mod tests;

use std::borrow::Cow;

pub use effect::{classify, CommandEffect};

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
