//! Whole-configuration checks: everything a running server would trip over, each on its
//! own, so `loopwatch check` can list them all.

use std::net::SocketAddr;

use crate::detector::ProfileSettings;

use super::errors::validate_log_level;
use super::{validate_security, Config, ConfigError, ServerConfig};

impl Config {
    /// Checks everything a running server would trip over: profiles, tool rules and
    /// signal sinks. The first of [`Config::problems`].
    pub fn validate(&self) -> Result<(), ConfigError> {
        match self.problems().into_iter().next() {
            Some(problem) => Err(problem),
            None => Ok(()),
        }
    }

    /// Every problem of the configuration, each check on its own, in the order
    /// [`Config::validate`] reports them; empty when the configuration is valid.
    pub fn problems(&self) -> Vec<ConfigError> {
        let key = |(key, reason)| ConfigError::Key { key, reason };
        let checks: [&dyn Fn() -> Result<(), ConfigError>; 18] = [
            &|| self.detection.run_key_mode().map(drop),
            &|| {
                validate_log_level(&self.log.level).map_err(|reason| ConfigError::Key {
                    key: "log.level".into(),
                    reason,
                })
            },
            &|| {
                if !self.admin.listen.is_empty() && self.admin.listen.parse::<SocketAddr>().is_err()
                {
                    return Err(ConfigError::Key {
                        key: "admin.listen".into(),
                        reason: format!(
                            "{:?} is not a socket address (e.g. 127.0.0.1:8787; empty = off)",
                            self.admin.listen
                        ),
                    });
                }
                Ok(())
            },
            &|| {
                if self.log.sampling.enabled && self.log.sampling.tick.is_zero() {
                    return Err(ConfigError::Key {
                        key: "log.sampling.tick".into(),
                        reason: "must be more than 0 when log.sampling.enabled".into(),
                    });
                }
                Ok(())
            },
            &|| self.profiles().map(drop),
            &|| self.check_tool_profiles(),
            &|| self.fingerprint_rules().map(drop),
            &|| self.conventions.validate().map_err(key),
            &|| {
                self.signals
                    .validate()
                    .map_err(|e| ConfigError::Other(e.to_string()))
            },
            &|| {
                self.exporter
                    .validate()
                    .map_err(|e| ConfigError::Other(format!("exporter: {e}")))
            },
            &|| {
                self.telemetry
                    .validate(&[self.receiver.grpc_listen, self.receiver.http_listen])
                    .map_err(|e| ConfigError::Other(e.to_string()))
            },
            &|| self.check_exporter_endpoint(),
            &|| {
                self.limits
                    .validate(self.receiver.options().max_recv_msg_size)
                    .map_err(key)
            },
            &|| self.registry.validate().map_err(key),
            &|| self.ui.validate().map_err(key),
            &|| self.budgets.validate().map_err(key),
            &|| self.receiver.validate().map_err(key),
            &|| {
                if self.server.worker_threads > ServerConfig::MAX_WORKER_THREADS {
                    return Err(ConfigError::Key {
                        key: "server.worker_threads".into(),
                        reason: format!(
                            "{} is more than {}; 0 means one per CPU",
                            self.server.worker_threads,
                            ServerConfig::MAX_WORKER_THREADS
                        ),
                    });
                }
                validate_security::validate(self).map_err(ConfigError::Other)
            },
        ];
        checks.iter().filter_map(|check| check().err()).collect()
    }

    /// `exporter.endpoint`, when set, is an http:// or https:// URL with a host.
    fn check_exporter_endpoint(&self) -> Result<(), ConfigError> {
        if let Some(endpoint) = self.exporter.endpoint.as_deref().filter(|e| !e.is_empty()) {
            let valid = endpoint.parse::<http::Uri>().ok().filter(|u| {
                matches!(u.scheme_str(), Some("http") | Some("https")) && u.host().is_some()
            });
            if valid.is_none() {
                return Err(ConfigError::Key {
                    key: "exporter.endpoint".into(),
                    reason: format!("{endpoint:?} is not an http:// or https:// URL with a host"),
                });
            }
        }
        Ok(())
    }

    /// Every `tools[i].profiles` entry names a profile (built in or `[profiles.*]`, enabled
    /// or not): a misspelt name would leave the rule acting nowhere.
    fn check_tool_profiles(&self) -> Result<(), ConfigError> {
        let known = |name: &str| {
            ProfileSettings::BUILT_IN.contains(&name) || self.profiles.contains_key(name)
        };
        for (i, tool) in self.tools.iter().enumerate() {
            if let Some(unknown) = tool.profiles.iter().find(|p| !known(p)) {
                let mut names: Vec<&str> = ProfileSettings::BUILT_IN.to_vec();
                names.extend(
                    self.profiles
                        .keys()
                        .map(String::as_str)
                        .filter(|n| !ProfileSettings::BUILT_IN.contains(n)),
                );
                return Err(ConfigError::Key {
                    key: format!("tools[{i}].profiles"),
                    reason: format!(
                        "no profile named {unknown:?} (profiles: {})",
                        names.join(", ")
                    ),
                });
            }
        }
        Ok(())
    }
}
