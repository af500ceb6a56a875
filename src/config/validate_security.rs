//! Validation of the security keys (`[receiver.tls]`, `[receiver.auth]`,
//! `[receiver.connections]`, `[admin]` token/TLS/connections, `[exporter.tls]`), run by
//! [`Config::validate`] so `check-config` and start-up report the same errors.

use super::Config;
use crate::net::auth::admin_check;

/// Checks every security key: TLS files load, tokens are readable and non-empty,
/// connection limits are usable, `[exporter.tls]` fits the endpoint's scheme.
///
/// # Errors
/// One message naming the key.
pub fn validate(config: &Config) -> Result<(), String> {
    config.receiver.tls.validate("receiver")?;
    config.admin.tls.validate("admin")?;
    config.receiver.auth.check()?;
    admin_check(
        config.admin.auth_token.as_deref(),
        config.admin.auth_token_file.as_deref(),
    )?;
    config.receiver.connections.validate("receiver")?;
    config.admin.connections.validate("admin")?;
    let exporter = &config.exporter;
    if let Some(endpoint) = exporter.endpoint.as_deref().filter(|e| !e.is_empty()) {
        if endpoint.starts_with("https://") {
            exporter
                .tls
                .tonic()
                .map_err(|e| format!("exporter.tls: {e}"))?;
        } else if exporter.tls.is_set() {
            return Err(format!(
                "exporter.tls: set, but exporter.endpoint {endpoint:?} is not https:// (TLS settings are never ignored)"
            ));
        }
    }
    let redis = &config.signals.redis;
    if redis.tls.is_set() {
        if !redis
            .url
            .as_deref()
            .is_some_and(|u| u.starts_with("rediss://"))
        {
            return Err(
                "signals.redis.tls: set, but signals.redis.url is not rediss:// (TLS settings are never ignored)"
                    .into(),
            );
        }
        redis
            .tls
            .redis_certificates()
            .map_err(|e| format!("signals.redis.tls: {e}"))?;
    }
    let nats = &config.signals.nats;
    if nats.tls.is_set() || nats.tls_first {
        nats.tls
            .nats_options(async_nats::ConnectOptions::new(), nats.tls_first)
            .map_err(|e| format!("signals.nats.tls: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_documents_the_security_defaults() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config.example.toml");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{e}"));
        let example = Config::from_toml(&text).unwrap_or_else(|e| panic!("{e}"));
        let default = Config::default();
        assert_eq!(example.receiver.tls, default.receiver.tls);
        assert_eq!(example.receiver.auth, default.receiver.auth);
        assert_eq!(example.receiver.connections, default.receiver.connections);
        assert_eq!(example.exporter.tls, default.exporter.tls);
        assert_eq!(example.signals.redis.tls, default.signals.redis.tls);
        assert_eq!(example.signals.nats.tls, default.signals.nats.tls);
        assert_eq!(
            example.signals.nats.tls_first,
            default.signals.nats.tls_first
        );
        assert_eq!(example.admin, default.admin);
        assert_eq!(default.admin.listen, "127.0.0.1:8787");
        assert_eq!(default.admin.connections.max_connections, 64);
    }

    #[test]
    fn errors_name_the_key() {
        let err = |toml: &str| {
            Config::from_toml(toml)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        assert!(
            err("[receiver.tls]\ncert_file = \"/nonexistent/tls.crt\"\n")
                .contains("receiver.tls: cert_file needs key_file"),
        );
        assert!(err(
            "[admin.tls]\ncert_file = \"/nonexistent/tls.crt\"\nkey_file = \"/nonexistent/tls.key\"\n"
        )
        .contains("admin.tls: /nonexistent/tls.crt: "));
        assert!(err("[receiver.connections]\nmax_connections = 0\n")
            .contains("receiver.connections.max_connections: must be at least 1"));
        assert!(
            err("[admin]\nauth_token = \"\"\n").contains("admin.auth_token: the token is empty")
        );
        assert!(err("[exporter]\nendpoint = \"https://x:4317\"\n[exporter.tls]\nca_file = \"/nonexistent/ca\"\n")
            .contains("exporter.tls: /nonexistent/ca: "));
        assert!(
            err("[receiver.auth]\ntoken = \"t\"\nheader = \"bad header\"\n")
                .contains("receiver.auth.header: ")
        );
    }
}
