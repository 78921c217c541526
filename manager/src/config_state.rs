//! The manager's view of `slo-controller-config`: the last good value of every key, and which
//! keys have never been good since this process started.
//!
//! A broken key keeps its last good value. A key that is broken from the start has no good
//! value at all: the manager then leaves everything derived from it untouched (it does not
//! apply the built-in defaults over what a previous run derived) until the key is fixed.

use std::collections::{BTreeMap, BTreeSet};

use koord_api::config::{ConfigKey, KeyError, ParsedConfig, SloConfig};

/// Per-key config with "last good value" semantics.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigState {
    /// Good keys from the ConfigMap, broken keys from their last good value; for keys in
    /// `unknown` this holds built-in defaults that must not be applied.
    config: SloConfig,
    /// Keys with no good value since start (every key before the first load).
    unknown: BTreeSet<ConfigKey>,
    /// The errors of the current ConfigMap, by key.
    errors: BTreeMap<ConfigKey, KeyError>,
}

/// What one ConfigMap load changed.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ConfigChange {
    /// The effective config differs: every node must be reconciled.
    pub changed: bool,
    /// Keys whose current value is broken (their last good value, if any, stays in force).
    pub errors: Vec<KeyError>,
    /// Keys that were broken before and are good now.
    pub recovered: Vec<ConfigKey>,
}

impl Default for ConfigState {
    fn default() -> Self {
        ConfigState::new()
    }
}

impl ConfigState {
    /// Before the first load: nothing is known.
    pub fn new() -> Self {
        ConfigState {
            config: SloConfig::default(),
            unknown: ConfigKey::ALL.into_iter().collect(),
            errors: BTreeMap::new(),
        }
    }

    /// Applies a ConfigMap's `data` (`None` when the ConfigMap does not exist).
    ///
    /// A missing ConfigMap at the first load means "every key at its default" (a fresh
    /// install). A ConfigMap deleted later is ignored by the caller (see README, "Decisions").
    pub fn apply(&mut self, data: Option<&BTreeMap<String, String>>) -> ConfigChange {
        let empty = BTreeMap::new();
        let parsed = SloConfig::parse(data.unwrap_or(&empty));
        self.apply_parsed(&parsed)
    }

    /// [`ConfigState::apply`] for an already parsed ConfigMap.
    pub fn apply_parsed(&mut self, parsed: &ParsedConfig) -> ConfigChange {
        let (config, errors) = parsed.merge_with_last_good(&self.config);
        let broken: BTreeSet<ConfigKey> = errors.iter().map(|e| e.key).collect();
        let unknown: BTreeSet<ConfigKey> = self.unknown.intersection(&broken).copied().collect();
        let recovered = self
            .errors
            .keys()
            .filter(|k| !broken.contains(k))
            .copied()
            .collect();
        let changed = config != self.config || unknown != self.unknown;
        self.config = config;
        self.unknown = unknown;
        self.errors = errors.iter().map(|e| (e.key, e.clone())).collect();
        ConfigChange {
            changed,
            errors,
            recovered,
        }
    }

    /// The effective config. Keys reported by [`ConfigState::is_known`] as unknown hold
    /// defaults that must not be applied.
    pub fn config(&self) -> &SloConfig {
        &self.config
    }

    /// False while `key` has had no good value since start.
    pub fn is_known(&self, key: ConfigKey) -> bool {
        !self.unknown.contains(&key)
    }

    /// True once the ConfigMap (or its absence) has been observed.
    pub fn is_loaded(&self) -> bool {
        self.unknown.len() < ConfigKey::ALL.len() || !self.errors.is_empty()
    }

    /// The errors of the current ConfigMap.
    pub fn errors(&self) -> impl Iterator<Item = &KeyError> {
        self.errors.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn broken_key_keeps_its_last_good_value_and_other_keys_apply() {
        let mut state = ConfigState::new();
        let first = state.apply(Some(&data(&[
            ("colocation-config", r#"{"enable":true}"#),
            (
                "resource-threshold-config",
                r#"{"clusterStrategy":{"enable":true,"cpuSuppressThresholdPercent":50}}"#,
            ),
        ])));
        assert!(first.changed && first.errors.is_empty());
        let change = state.apply(Some(&data(&[
            (
                "colocation-config",
                r#"{"enable":true,"cpuReclaimThresholdPercent":70}"#,
            ),
            ("resource-threshold-config", r#"{"clusterStrategy":{"enable":"#),
        ])));
        assert!(change.changed);
        assert_eq!(change.errors.len(), 1);
        assert_eq!(change.errors[0].key, ConfigKey::ResourceThreshold);
        let config = state.config();
        assert_eq!(
            config.resource_threshold.cluster.cpu_suppress_threshold_percent,
            Some(50)
        );
        assert_eq!(config.colocation.cluster.cpu_reclaim_threshold_percent, Some(70));
        assert!(state.is_known(ConfigKey::ResourceThreshold));
    }

    #[test]
    fn key_broken_from_start_is_unknown_until_fixed() {
        let mut state = ConfigState::new();
        assert!(!state.is_loaded());
        state.apply(Some(&data(&[("cpu-burst-config", "not json")])));
        assert!(state.is_loaded());
        assert!(!state.is_known(ConfigKey::CpuBurst));
        assert!(state.is_known(ConfigKey::Colocation));
        let change = state.apply(Some(&data(&[(
            "cpu-burst-config",
            r#"{"clusterStrategy":{"policy":"auto"}}"#,
        )])));
        assert!(change.changed);
        assert_eq!(change.recovered, vec![ConfigKey::CpuBurst]);
        assert!(state.is_known(ConfigKey::CpuBurst));
    }

    #[test]
    fn missing_config_map_at_start_means_defaults() {
        let mut state = ConfigState::new();
        let change = state.apply(None);
        assert!(change.changed && change.errors.is_empty());
        assert!(ConfigKey::ALL.iter().all(|k| state.is_known(*k)));
        assert!(!state.apply(None).changed);
    }
}
