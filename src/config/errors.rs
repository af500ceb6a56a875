//! Configuration errors, each naming the key or file at fault: figment's errors described
//! with dotted keys, and the `log.level` check.

/// Configuration errors, each naming the key or file at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config file {0} does not exist")]
    MissingFile(String),
    /// Parse errors, one per bad key: `key: what is wrong (where it came from)`.
    #[error("invalid configuration: {0}")]
    Invalid(String),
    #[error("invalid configuration: {key}: {reason}")]
    Key { key: String, reason: String },
    #[error("invalid configuration: {0}")]
    Other(String),
}

/// Checks a `log.level` filter: comma-separated directives, each a level (`trace`,
/// `debug`, `info`, `warn`, `error`, `off`) or `target=level` (`tracing_subscriber`'s
/// `EnvFilter` syntax). A bare word that is no level is refused: `EnvFilter` would read it
/// as a target name and turn every other log line off, the detection lines included.
pub(super) fn validate_log_level(level: &str) -> Result<(), String> {
    use tracing_subscriber::filter::LevelFilter;
    for directive in level.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let level_part = match directive.rsplit_once('=') {
            Some((_, level)) => level,
            None if directive.contains('[') => continue,
            None => directive,
        };
        if level_part.parse::<LevelFilter>().is_err() {
            return Err(format!(
                "{directive:?} is not a level (trace, debug, info, warn, error, off) \
                 or a `target=level` directive"
            ));
        }
    }
    tracing_subscriber::EnvFilter::try_new(level)
        .map(drop)
        .map_err(|e| format!("{level:?}: {e}"))
}

/// One line per figment error: the dotted key (without figment's profile prefix), what is
/// wrong, and the source (file or `LOOPWATCH_` environment variable).
pub(super) fn describe(error: figment::Error) -> ConfigError {
    describe_with_fields(error, &[])
}

/// A figment path as the rest of loopwatch's errors name keys: sections joined with `.`,
/// list indices in brackets (`["tools", "0", "tool"]` → `tools[0].tool`). A number under a
/// table keyed by names the user chose (`profiles`, `tool_volatile_keys`) is a name.
pub(super) fn dotted_key(path: &[String]) -> String {
    let mut key = String::new();
    let mut parent = "";
    for segment in path {
        let named = matches!(parent, "profiles" | "tool_volatile_keys");
        parent = segment;
        if !key.is_empty() && !named && segment.parse::<usize>().is_ok() {
            key.push_str(&format!("[{segment}]"));
        } else {
            if !key.is_empty() {
                key.push('.');
            }
            key.push_str(segment);
        }
    }
    key
}

/// [`describe`], where an unknown field's list of expected fields also names
/// `extra_fields` (keys read before the rest is extracted, e.g. a profile's `extends`).
pub(super) fn describe_with_fields(error: figment::Error, extra_fields: &[&str]) -> ConfigError {
    let lines: Vec<String> = error
        .into_iter()
        .map(|e| {
            let key = dotted_key(&e.path);
            let origin = e
                .metadata
                .as_ref()
                .and_then(|m| match &m.source {
                    // A value merged in code (profiles are re-read after presets and
                    // `extends` are applied) has no user-facing origin.
                    Some(figment::Source::Code(_)) => None,
                    Some(source) => Some(format!(" (in {source})")),
                    None => Some(format!(" (in {})", m.name)),
                })
                .unwrap_or_default();
            let what = match &e.kind {
                figment::error::Kind::UnknownField(field, expected) => {
                    let mut expected: Vec<&str> = expected.to_vec();
                    expected.extend(extra_fields);
                    let list: Vec<String> = expected.iter().map(|f| format!("`{f}`")).collect();
                    format!(
                        "unknown field `{field}`, expected one of {}",
                        list.join(", ")
                    )
                }
                kind => {
                    // figment quotes the whole list: expected `one of `a`, `b``
                    let mut what = kind.to_string().replace("`one of ", "one of ");
                    if what.ends_with("``") {
                        what.pop();
                    }
                    what
                }
            };
            if key.is_empty() {
                format!("{what}{origin}")
            } else {
                format!("{key}: {what}{origin}")
            }
        })
        .collect();
    ConfigError::Invalid(lines.join("; "))
}

pub(super) fn key_error(e: crate::detector::ProfileError) -> ConfigError {
    ConfigError::Key {
        key: e.key,
        reason: e.reason,
    }
}
