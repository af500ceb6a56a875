//! The profiles to run and the `[[tools]]` fingerprint rules, resolved from presets,
//! built-ins and the user's tables.

use figment::providers::Serialized;
use figment::Figment;

use crate::detector::{FingerprintRules, ProfileSettings, ToolRule, ToolRules};

use super::errors::{describe_with_fields, key_error};
use super::{Config, ConfigError};

impl Config {
    /// The `[[tools]]` fingerprint keys (volatile keys, transient errors), compiled.
    /// Errors name the key (`tools[i].match`, `tools[i].transient_errors`, …).
    pub fn fingerprint_rules(&self) -> Result<FingerprintRules, ConfigError> {
        FingerprintRules::compile(
            &self.tools,
            &self.detection.volatile_keys,
            &self.detection.result_volatile_keys,
        )
        .map_err(key_error)
    }

    /// The profiles to run: the built-ins `nudge` and `stop` (unless `enabled = false`),
    /// then user profiles in name order. Each starts from a base, then takes its keys:
    /// the base is the preset named by `preset`, else the built-in of the same name, else
    /// the built-in named by `extends` (default `nudge`). Each gets the `[[tools]]` entries
    /// that apply to it, then its preset's own entries. Errors name the key.
    pub fn profiles(&self) -> Result<Vec<ProfileSettings>, ConfigError> {
        let mut names: Vec<String> = ProfileSettings::BUILT_IN.map(String::from).to_vec();
        names.extend(
            self.profiles
                .keys()
                .filter(|n| !ProfileSettings::BUILT_IN.contains(&n.as_str()))
                .cloned(),
        );
        let mut out = Vec::new();
        for name in names {
            if let Some(settings) = self.profile(&name)? {
                out.push(settings);
            }
        }
        Ok(out)
    }

    /// One profile, resolved and validated; `None` when it is switched off.
    pub(super) fn profile(&self, name: &str) -> Result<Option<ProfileSettings>, ConfigError> {
        let key = |field: &str| format!("profiles.{name}.{field}");
        let mut own = self.profiles.get(name).cloned().unwrap_or_default();
        let text = |field: &str, own: &mut figment::value::Dict| match own.remove(field) {
            None => Ok(None),
            Some(v) => v.into_string().map(Some).ok_or_else(|| ConfigError::Key {
                key: key(field),
                reason: "must be a string".into(),
            }),
        };
        let extends = text("extends", &mut own)?;
        let preset = text("preset", &mut own)?;
        let built_in = ProfileSettings::BUILT_IN.contains(&name);
        let mut base = match (&preset, &extends) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::Key {
                    key: key("extends"),
                    reason: "set either preset or extends, not both".into(),
                })
            }
            (Some(preset), None) => {
                ProfileSettings::preset_table(preset).ok_or_else(|| ConfigError::Key {
                    key: key("preset"),
                    reason: format!(
                        "unknown preset {preset:?} (expected one of {})",
                        ProfileSettings::preset_names().join(", ")
                    ),
                })?
            }
            (None, Some(_)) if built_in => {
                return Err(ConfigError::Key {
                    key: key("extends"),
                    reason: "a built-in profile cannot extend another".into(),
                })
            }
            (None, extends) => {
                let base = extends.as_deref().unwrap_or("nudge");
                let base = if built_in { name } else { base };
                ProfileSettings::built_in_table(base).ok_or_else(|| ConfigError::Key {
                    key: key("extends"),
                    reason: format!(
                        "unknown built-in profile {base:?} (expected {})",
                        ProfileSettings::BUILT_IN.join(" or ")
                    ),
                })?
            }
        };
        let preset_tools: Vec<ToolRule> = match base.remove("tools") {
            Some(tools) => tools
                .try_into()
                .map_err(|e| ConfigError::Other(format!("preset tools: {e}")))?,
            None => Vec::new(),
        };
        let mut settings: ProfileSettings = Figment::from(Serialized::defaults(base))
            .merge(Serialized::defaults(own))
            .extract()
            .map_err(|e| match describe_with_fields(e, &["extends", "preset"]) {
                ConfigError::Invalid(text) => {
                    ConfigError::Invalid(format!("profiles.{name}.{text}"))
                }
                other => other,
            })?;
        settings.name = name.to_string();
        if !settings.enabled {
            return Ok(None);
        }
        settings.validate().map_err(key_error)?;
        let mut entries: Vec<(String, ToolRule)> = self
            .tools
            .iter()
            .enumerate()
            .map(|(i, t)| (format!("tools[{i}]"), t.clone()))
            .collect();
        entries.extend(
            preset_tools
                .into_iter()
                .enumerate()
                .map(|(i, t)| (format!("{}.tools[{i}]", key("preset")), t)),
        );
        settings.tools = std::sync::Arc::new(
            ToolRules::compile(&settings.limits_base(), &entries).map_err(key_error)?,
        );
        Ok(Some(settings))
    }
}
