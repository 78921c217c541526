//! Per-key parsing with "last good value" semantics.
//!
//! Each key is parsed, merged and validated on its own: one broken key never blocks the
//! others. The caller decides what a broken key means: the manager keeps that key's last good
//! value ([`ParsedConfig::merge_with_last_good`]); the webhook rejects the ConfigMap; one-shot
//! tools fail ([`ParsedConfig::into_config`]).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use schemars::JsonSchema;
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

use super::ConfigKey;
use super::canonical::canonicalize;
use super::check::{self, Check};
use super::colocation::{ColocationCfg, ColocationStrategy};
use super::error::{ConfigError, ConfigWarning, KeyError, Rule, WarningKind};
use super::layer::{Layered, NodeEntry, Shape, layer};
use super::types::{
    CpuBurstCfg, CpuNormalizationCfg, CpuNormalizationStrategy, HostApplicationCfg, ResourceAmplificationCfg,
    ResourceAmplificationStrategy, ResourceQosCfg, ResourceThresholdCfg, SystemCfg,
};
use super::validate;
use super::validate_qos;
use crate::nodeslo::{
    CpuBurstPolicy, CpuBurstStrategy, CpuEvictPolicy, CpuSuppressPolicy, HostApplicationSpec,
    ResourceQosStrategy, ResourceThresholdStrategy, SystemStrategy,
};

/// The whole, usable `slo-controller-config`: every key merged and valid.
#[derive(Debug, Clone, PartialEq)]
pub struct SloConfig {
    /// `colocation-config`.
    pub colocation: Layered<ColocationStrategy>,
    /// `resource-threshold-config`.
    pub resource_threshold: Layered<ResourceThresholdStrategy>,
    /// `resource-qos-config`.
    pub resource_qos: Layered<ResourceQosStrategy>,
    /// `cpu-burst-config` (pod strategies inside each strategy's `podStrategies`).
    pub cpu_burst: Layered<CpuBurstStrategy>,
    /// `system-config`.
    pub system: Layered<SystemStrategy>,
    /// `host-application-config`: node entries replace the cluster list.
    pub host_application: Layered<Vec<HostApplicationSpec>>,
    /// `cpu-normalization-config`.
    pub cpu_normalization: Layered<CpuNormalizationStrategy>,
    /// `resource-amplification-config`.
    pub resource_amplification: Layered<ResourceAmplificationStrategy>,
}

/// Built-in `resource-threshold-config` cluster strategy.
pub fn default_resource_threshold() -> ResourceThresholdStrategy {
    ResourceThresholdStrategy {
        enable: Some(false),
        cpu_suppress_threshold_percent: Some(65),
        cpu_suppress_policy: Some(CpuSuppressPolicy::Cpuset),
        memory_evict_threshold_percent: Some(70),
        cpu_evict_policy: Some(CpuEvictPolicy::EvictByRealLimit),
        ..Default::default()
    }
}

/// Built-in `cpu-burst-config` cluster strategy.
pub fn default_cpu_burst() -> CpuBurstStrategy {
    CpuBurstStrategy {
        policy: Some(CpuBurstPolicy::None),
        cpu_burst_percent: Some(1000),
        cfs_quota_burst_percent: Some(300),
        cfs_quota_burst_period_seconds: Some(-1),
        share_pool_threshold_percent: Some(50),
        pod_strategies: None,
    }
}

/// Built-in `system-config` cluster strategy.
pub fn default_system() -> SystemStrategy {
    SystemStrategy {
        total_network_bandwidth: Quantity("0".to_owned()),
        ..Default::default()
    }
}

impl Default for SloConfig {
    /// Every key at its built-in default (what a cluster without the ConfigMap gets).
    fn default() -> Self {
        SloConfig {
            colocation: Layered::cluster_only(ColocationStrategy::builtin_default()),
            resource_threshold: Layered::cluster_only(default_resource_threshold()),
            resource_qos: Layered::cluster_only(ResourceQosStrategy::default()),
            cpu_burst: Layered::cluster_only(default_cpu_burst()),
            system: Layered::cluster_only(default_system()),
            host_application: Layered::cluster_only(Vec::new()),
            cpu_normalization: Layered::cluster_only(CpuNormalizationStrategy {
                enable: Some(false),
                ..Default::default()
            }),
            resource_amplification: Layered::cluster_only(ResourceAmplificationStrategy {
                enable: Some(false),
                ..Default::default()
            }),
        }
    }
}

/// The outcome of one key.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyParse<S> {
    /// Whether the ConfigMap had a non-empty value for the key (false = built-in default).
    pub present: bool,
    /// The merged, validated strategies, or every problem found.
    pub result: Result<Layered<S>, KeyError>,
    /// Tolerated problems (unknown or duplicate fields).
    pub warnings: Vec<ConfigWarning>,
}

/// Every key's outcome; see the module docs for how callers combine them.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedConfig {
    /// `colocation-config`.
    pub colocation: KeyParse<ColocationStrategy>,
    /// `resource-threshold-config`.
    pub resource_threshold: KeyParse<ResourceThresholdStrategy>,
    /// `resource-qos-config`.
    pub resource_qos: KeyParse<ResourceQosStrategy>,
    /// `cpu-burst-config`.
    pub cpu_burst: KeyParse<CpuBurstStrategy>,
    /// `system-config`.
    pub system: KeyParse<SystemStrategy>,
    /// `host-application-config`.
    pub host_application: KeyParse<Vec<HostApplicationSpec>>,
    /// `cpu-normalization-config`.
    pub cpu_normalization: KeyParse<CpuNormalizationStrategy>,
    /// `resource-amplification-config`.
    pub resource_amplification: KeyParse<ResourceAmplificationStrategy>,
    /// ConfigMap keys that are none of ours (typos such as `resource-gos-config`).
    pub unknown_keys: Vec<ConfigWarning>,
}

fn pick<S: Clone>(k: &KeyParse<S>, last: &Layered<S>, errors: &mut Vec<KeyError>) -> Layered<S> {
    match &k.result {
        Ok(v) => v.clone(),
        Err(e) => {
            errors.push(e.clone());
            last.clone()
        }
    }
}

impl ParsedConfig {
    /// The usable config: good keys from this ConfigMap, broken keys from `last_good` (the
    /// previous result, or [`SloConfig::default`] before the first good load). Also returns
    /// the errors of the broken keys, for the Warning Event.
    pub fn merge_with_last_good(&self, last_good: &SloConfig) -> (SloConfig, Vec<KeyError>) {
        let mut e = Vec::new();
        let cfg = SloConfig {
            colocation: pick(&self.colocation, &last_good.colocation, &mut e),
            resource_threshold: pick(&self.resource_threshold, &last_good.resource_threshold, &mut e),
            resource_qos: pick(&self.resource_qos, &last_good.resource_qos, &mut e),
            cpu_burst: pick(&self.cpu_burst, &last_good.cpu_burst, &mut e),
            system: pick(&self.system, &last_good.system, &mut e),
            host_application: pick(&self.host_application, &last_good.host_application, &mut e),
            cpu_normalization: pick(&self.cpu_normalization, &last_good.cpu_normalization, &mut e),
            resource_amplification: pick(
                &self.resource_amplification,
                &last_good.resource_amplification,
                &mut e,
            ),
        };
        (cfg, e)
    }

    /// The config if every key is good, else every key's errors.
    pub fn into_config(self) -> Result<SloConfig, Vec<KeyError>> {
        let (cfg, errors) = self.merge_with_last_good(&SloConfig::default());
        if errors.is_empty() { Ok(cfg) } else { Err(errors) }
    }

    /// The errors of every broken key.
    pub fn errors(&self) -> Vec<KeyError> {
        self.merge_with_last_good(&SloConfig::default()).1
    }

    /// Every warning: unknown keys first, then each key's field warnings.
    pub fn warnings(&self) -> Vec<ConfigWarning> {
        let mut w = self.unknown_keys.clone();
        w.extend(self.colocation.warnings.iter().cloned());
        w.extend(self.resource_threshold.warnings.iter().cloned());
        w.extend(self.resource_qos.warnings.iter().cloned());
        w.extend(self.cpu_burst.warnings.iter().cloned());
        w.extend(self.system.warnings.iter().cloned());
        w.extend(self.host_application.warnings.iter().cloned());
        w.extend(self.cpu_normalization.warnings.iter().cloned());
        w.extend(self.resource_amplification.warnings.iter().cloned());
        w
    }
}

/// The canonical top-level object of a key and the result of its typed shape check.
type ReadKey<C> = (serde_json::Map<String, Value>, Result<C, Vec<ConfigError>>);

/// Step 1-3 of every key: JSON, top-level object, canonical field names, typed shape check.
fn read_key<C: JsonSchema + DeserializeOwned>(
    key: ConfigKey,
    raw: &str,
    warnings: &mut Vec<ConfigWarning>,
) -> Result<ReadKey<C>, Vec<ConfigError>> {
    let mut value: Value = serde_json::from_str(raw)
        .map_err(|e| vec![ConfigError::new(key, "", Rule::InvalidJson(e.to_string()))])?;
    if !value.is_object() {
        let found = match value {
            Value::Array(_) => "an array",
            Value::String(_) => "a string",
            Value::Number(_) => "a number",
            Value::Bool(_) => "a boolean",
            _ => "null",
        };
        return Err(vec![ConfigError::new(key, "", Rule::NotAnObject(found))]);
    }
    warnings.extend(canonicalize::<C>(&mut value, key.name(), ""));
    let typed: Result<C, _> = serde_path_to_error::deserialize(value.clone()).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." { String::new() } else { path };
        vec![ConfigError::new(
            key,
            path,
            Rule::WrongType(e.into_inner().to_string()),
        )]
    });
    match value {
        Value::Object(m) => Ok((m, typed)),
        _ => Err(Vec::new()),
    }
}

fn finish<S>(
    key: ConfigKey,
    present: bool,
    r: Result<Layered<S>, Vec<ConfigError>>,
    warnings: Vec<ConfigWarning>,
) -> KeyParse<S> {
    KeyParse {
        present,
        result: r.map_err(|errors| KeyError { key, errors }),
        warnings,
    }
}

fn key_value(data: &BTreeMap<String, String>, key: ConfigKey) -> Option<&str> {
    data.get(key.name())
        .map(String::as_str)
        .filter(|s| !s.trim().is_empty())
}

/// Parses, merges and validates one strategy key.
fn strategy_key<C, S>(
    data: &BTreeMap<String, String>,
    key: ConfigKey,
    default: S,
    shape: Shape,
    mut rules: impl FnMut(&S, &mut Check<'_>, bool, &C),
) -> KeyParse<S>
where
    C: JsonSchema + DeserializeOwned,
    S: Serialize + DeserializeOwned,
{
    let Some(raw) = key_value(data, key) else {
        return finish(key, false, Ok(Layered::cluster_only(default)), Vec::new());
    };
    let mut warnings = Vec::new();
    let result = read_key::<C>(key, raw, &mut warnings).and_then(|(root, typed)| {
        // The layered strategies are deserialized without `flatten`, so their type errors carry
        // the full field path; the whole-key check catches what layering does not look at.
        let l = layer(key, &default, &root, shape)?;
        let typed = typed?;
        let errors = check::layered(key, &l, |s, c, is_cluster| rules(s, c, is_cluster, &typed));
        if errors.is_empty() { Ok(l) } else { Err(errors) }
    });
    finish(key, true, result, warnings)
}

fn host_applications(data: &BTreeMap<String, String>) -> KeyParse<Vec<HostApplicationSpec>> {
    let key = ConfigKey::HostApplication;
    let Some(raw) = key_value(data, key) else {
        return finish(key, false, Ok(Layered::cluster_only(Vec::new())), Vec::new());
    };
    let mut warnings = Vec::new();
    let result = read_key::<HostApplicationCfg>(key, raw, &mut warnings).and_then(|(_, cfg)| {
        let cfg = cfg?;
        let l = Layered {
            cluster: cfg.applications.unwrap_or_default(),
            nodes: (cfg.node_configs.unwrap_or_default().into_iter().enumerate())
                .map(|(index, n)| NodeEntry {
                    index,
                    name: n.name,
                    node_selector: n.node_selector,
                    strategy: n.applications.unwrap_or_default(),
                })
                .collect(),
        };
        let errors = check::layered(key, &l, |apps, c, is_cluster| {
            let mut c = if is_cluster {
                c.sub("")
            } else {
                c.sub("applications")
            };
            validate::host_applications(apps, &mut c);
        });
        if errors.is_empty() { Ok(l) } else { Err(errors) }
    });
    finish(key, true, result, warnings)
}

impl SloConfig {
    /// Parses every key of the ConfigMap `data`; never fails as a whole (see [`ParsedConfig`]).
    /// A missing or blank key is its built-in default.
    pub fn parse(data: &BTreeMap<String, String>) -> ParsedConfig {
        let envelope = Shape::Envelope {
            nested: None,
            pods: false,
        };
        let burst_shape = Shape::Envelope {
            nested: Some("cpuBurstStrategy"),
            pods: true,
        };
        let mut parsed = ParsedConfig {
            colocation: strategy_key::<ColocationCfg, _>(
                data,
                ConfigKey::Colocation,
                ColocationStrategy::builtin_default(),
                Shape::Flat,
                |s, c, _, _| validate::colocation(s, c),
            ),
            resource_threshold: strategy_key::<ResourceThresholdCfg, _>(
                data,
                ConfigKey::ResourceThreshold,
                default_resource_threshold(),
                envelope,
                |s, c, _, _| validate::threshold(s, c),
            ),
            resource_qos: strategy_key::<ResourceQosCfg, _>(
                data,
                ConfigKey::ResourceQos,
                ResourceQosStrategy::default(),
                envelope,
                |s, c, _, _| validate_qos::resource_qos(s, c),
            ),
            cpu_burst: strategy_key::<CpuBurstCfg, _>(
                data,
                ConfigKey::CpuBurst,
                default_cpu_burst(),
                burst_shape,
                |s, c, is_cluster, cfg: &CpuBurstCfg| {
                    let top_level = is_cluster && cfg.pod_strategies.is_some();
                    validate::burst(s, c, top_level.then_some("podStrategies"));
                },
            ),
            system: strategy_key::<SystemCfg, _>(
                data,
                ConfigKey::System,
                default_system(),
                envelope,
                |s, c, _, _| validate::system(s, c),
            ),
            host_application: host_applications(data),
            cpu_normalization: strategy_key::<CpuNormalizationCfg, _>(
                data,
                ConfigKey::CpuNormalization,
                CpuNormalizationStrategy {
                    enable: Some(false),
                    ..Default::default()
                },
                Shape::Flat,
                |s, c, _, _| validate::cpu_normalization(s, c),
            ),
            resource_amplification: strategy_key::<ResourceAmplificationCfg, _>(
                data,
                ConfigKey::ResourceAmplification,
                ResourceAmplificationStrategy {
                    enable: Some(false),
                    ..Default::default()
                },
                Shape::Flat,
                |s, c, _, _| validate::resource_amplification(s, c),
            ),
            unknown_keys: data
                .keys()
                .filter(|k| ConfigKey::from_name(k).is_none())
                .map(|k| ConfigWarning {
                    key: k.clone(),
                    path: String::new(),
                    kind: WarningKind::UnknownKey,
                })
                .collect(),
        };
        // The one cross-key rule: network bandwidth requests against system-config's total.
        if let (Ok(qos), Ok(system)) = (&parsed.resource_qos.result, &parsed.system.result) {
            let errors = validate_qos::network_bandwidth(qos, system);
            if !errors.is_empty() {
                parsed.resource_qos.result = Err(KeyError {
                    key: ConfigKey::ResourceQos,
                    errors,
                });
            }
        }
        parsed
    }
}
