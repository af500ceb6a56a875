//! Validation of the security keys (`[receiver.tls]`, `[receiver.auth]`,
//! `[receiver.connections]`, `[admin]` token/TLS/connections, `[exporter.tls]`), run by
//! [`Config::validate`] so `check-config` and start-up report the same errors.

use super::Config;
use crate::auth::admin_check;

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
    Ok(())
}
