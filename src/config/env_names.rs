//! Environment variables that look like config keys but are not read.
//!
//! Config keys come from the environment as `LOOPWATCH_<SECTION>__<KEY>`, with a double
//! underscore between the levels (`LOOPWATCH_EXPORTER__ENDPOINT` is `exporter.endpoint`).
//! A name with single underscores only (`LOOPWATCH_EXPORTER_ENDPOINT`) is not a config
//! key and is not read: other names under the prefix are left alone on purpose, since
//! Kubernetes service links put `LOOPWATCH_SERVICE_HOST`, `LOOPWATCH_PORT_4317_TCP` and
//! the like into the environment of every pod beside a Service named `loopwatch`. So such
//! a name is reported only when one spelling of it with some underscores read as level
//! separators is a real key; the report names that spelling.

use figment::providers::Serialized;
use figment::Figment;

use super::Config;

/// Variables under the prefix that the CLI reads itself (`--config`).
const CLI_VARIABLES: &[&str] = &["LOOPWATCH_CONFIG"];

/// Underscores tried as level separators, at most (2^6 spellings per name).
const MAX_UNDERSCORES: usize = 6;

/// One warning per variable of `vars` (name, value) that is not read but would be a
/// config key with `__` between its levels, e.g.
/// "LOOPWATCH_EXPORTER_ENDPOINT is not read: config keys in the environment separate
/// levels with `__`; did you mean LOOPWATCH_EXPORTER__ENDPOINT (exporter.endpoint)?".
/// Names are matched case-insensitively, as figment's `Env` reads them.
pub fn unread_key_warnings(vars: impl IntoIterator<Item = (String, String)>) -> Vec<String> {
    let mut warnings = Vec::new();
    for (name, value) in vars {
        let Some(rest) = name.strip_prefix("LOOPWATCH_") else {
            continue;
        };
        if rest.contains("__") || CLI_VARIABLES.contains(&name.as_str()) {
            continue;
        }
        if let Some(key) = key_spelled(&rest.to_ascii_lowercase(), &value) {
            let suggestion = format!("LOOPWATCH_{}", key.to_ascii_uppercase().replace('.', "__"));
            warnings.push(format!(
                "{name} is not read: config keys in the environment separate levels with \
                 `__`; did you mean {suggestion} ({key})?"
            ));
        }
    }
    warnings
}

/// [`unread_key_warnings`] of this process's environment.
pub fn unread_env_key_warnings() -> Vec<String> {
    unread_key_warnings(std::env::vars())
}

/// The config key (dotted) that `name` spells when some of its underscores are read as
/// level separators, fewest levels first; `None` when none is a key.
fn key_spelled(name: &str, value: &str) -> Option<String> {
    let underscores: Vec<usize> = name.match_indices('_').map(|(i, _)| i).collect();
    if underscores.is_empty() || underscores.len() > MAX_UNDERSCORES {
        return None;
    }
    let mut spellings: Vec<u32> = (1..1u32 << underscores.len()).collect();
    spellings.sort_by_key(|mask| mask.count_ones());
    spellings.into_iter().find_map(|mask| {
        let mut key = name.as_bytes().to_vec();
        for (bit, &at) in underscores.iter().enumerate() {
            if mask & (1 << bit) != 0 {
                key[at] = b'.';
            }
        }
        let key = String::from_utf8(key).ok()?;
        is_key(&key, value).then_some(key)
    })
}

/// Whether `key` (dotted) is a config key: setting it to `value` (as the environment
/// would) fails for no unknown field. A wrong type still means the key exists.
fn is_key(key: &str, value: &str) -> bool {
    if key.split('.').any(str::is_empty) {
        return false;
    }
    let figment = Figment::from(Serialized::defaults(Config::default())).merge(
        Serialized::default(key, figment::value::Value::from(value.to_string())),
    );
    match figment.extract::<Config>() {
        Ok(_) => true,
        Err(errors) => !errors
            .into_iter()
            .any(|e| matches!(e.kind, figment::error::Kind::UnknownField(..))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn warnings(vars: &[(&str, &str)]) -> Vec<String> {
        unread_key_warnings(vars.iter().map(|(n, v)| (n.to_string(), v.to_string())))
    }

    #[test]
    fn a_single_underscore_key_is_reported_with_its_spelling() {
        let w = warnings(&[("LOOPWATCH_EXPORTER_ENDPOINT", "http://collector:4317")]);
        assert_eq!(
            w,
            [
                "LOOPWATCH_EXPORTER_ENDPOINT is not read: config keys in the environment \
              separate levels with `__`; did you mean LOOPWATCH_EXPORTER__ENDPOINT \
              (exporter.endpoint)?"
            ]
        );
    }

    #[test]
    fn underscores_inside_a_key_stay_and_nested_sections_are_found() {
        let w = warnings(&[("LOOPWATCH_RECEIVER_GRPC_LISTEN", "0.0.0.0:4317")]);
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("LOOPWATCH_RECEIVER__GRPC_LISTEN (receiver.grpc_listen)"));
        let w = warnings(&[("LOOPWATCH_LOG_SAMPLING_ENABLED", "false")]);
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("LOOPWATCH_LOG__SAMPLING__ENABLED (log.sampling.enabled)"));
    }

    #[test]
    fn a_wrong_value_still_names_the_key() {
        let w = warnings(&[("LOOPWATCH_LOG_SAMPLING_ENABLED", "not-a-bool")]);
        assert_eq!(w.len(), 1);
    }

    #[test]
    fn keys_read_the_cli_variable_and_service_links_are_not_reported() {
        let w = warnings(&[
            ("LOOPWATCH_EXPORTER__ENDPOINT", "http://collector:4317"),
            ("LOOPWATCH_CONFIG", "/etc/loopwatch.toml"),
            ("LOOPWATCH_SERVICE_HOST", "10.0.0.1"),
            ("LOOPWATCH_PORT", "tcp://10.0.0.1:4317"),
            ("LOOPWATCH_PORT_4317_TCP_ADDR", "10.0.0.1"),
            ("LOOPWATCH_ADMIN_SERVICE_PORT", "8787"),
            ("OTHER_EXPORTER_ENDPOINT", "x"),
        ]);
        assert_eq!(w, Vec::<String>::new());
    }
}
