//! The `slo-controller-config` ConfigMap: typed keys, built-in defaults, Go-compatible parsing,
//! merge, semantic validation, and the per-node result (effective strategies + NodeSLO spec).
//!
//! # Flow
//! 1. [`SloConfig::parse`] takes the ConfigMap `data` and returns a [`ParsedConfig`]: one
//!    [`KeyParse`] per key, each independently `Ok` (parsed, merged, validated) or `Err`
//!    ([`KeyError`] naming the key, the field path and the rule). A missing or empty key is its
//!    built-in default. Unknown fields and unknown keys are warnings, never errors.
//! 2. The manager calls [`ParsedConfig::merge_with_last_good`] to keep the last good value of
//!    every broken key while applying the good ones; one-shot tools call
//!    [`ParsedConfig::into_config`].
//! 3. [`SloConfig::for_node`] gives the [`EffectiveNodeConfig`] of one Node (first matching
//!    node entry, node annotations and labels), and [`EffectiveNodeConfig::node_slo_spec`] the
//!    NodeSLO spec. [`resolve_node`] does all three in one call.
//!
//! # Parsing like Go's encoding/json
//! Field names match case-insensitively (an exact spelling wins), unknown fields are dropped
//! with a warning (see `canonical`), `null` means "unset".
//!
//! # Merge
//! Exactly upstream's `MergeCfg`: a JSON deep merge where set fields override, unset fields
//! inherit, maps merge key by key and lists are replaced whole. Cluster strategy = built-in
//! default ⊕ `clusterStrategy` (flat keys: the top-level fields); node entry = merged cluster ⊕
//! the entry's fields. `cpu-burst-config` node entries may also nest their fields under
//! `cpuBurstStrategy` (seed 000); nested fields overlay inline ones. Its top-level
//! `podStrategies` belong to the cluster layer (replacing `clusterStrategy.podStrategies` if
//! both are given), so a node entry may replace the list.
//!
//! # Deliberate differences from upstream
//! - Semantic validation runs in the manager too: a key that parses but breaks a rule keeps
//!   its last good value like a key that does not parse (upstream validates only in the
//!   webhook, and for colocation replaces an invalid node entry by the cluster strategy).
//! - A node-entry selector that does not parse makes the key invalid (upstream skips the entry).
//! - A blank key is its default (upstream: JSON error except for colocation).
//! - Unset fields of a node entry always inherit, including `totalNetworkBandwidth`.
//! - Network bandwidth requests (`ingressRequest`/`egressRequest` quantities of LSR+LS+BE) are
//!   checked against the `totalNetworkBandwidth` of the system-config entry with the same
//!   selector, else of its cluster strategy (upstream takes 0 when no entry matches); a total
//!   of `0` means unknown (nodes may carry the bandwidth annotation) and is not checked against.
//! - Node overrides that do not parse or would leave the valid range are ignored with a note
//!   (see [`node`]); a bad network-bandwidth annotation no longer drops the system strategy.
//! - Webhook-only rules (empty selectors, overlaps, names) are separate functions
//!   ([`node_entry_problems`], [`node_entry_name_errors`]) so the manager keeps upstream's
//!   tolerant semantics (`{}` matches all, no selector matches none).

mod admission;
mod canonical;
mod check;
pub mod colocation;
pub mod error;
mod layer;
pub mod node;
pub mod parse;
pub mod pod_burst;
mod syntax;
pub mod types;
mod validate;
mod validate_qos;

use std::fmt;

pub use admission::{
    node_entry_name_errors, node_entry_problems, validate_colocation_strategy, validate_cpu_burst_config,
    validate_node_slo_spec,
};
pub use colocation::{CalculatePolicy, ColocationCfg, ColocationStrategy, MetricAggregatePolicy};
pub use error::{ConfigError, ConfigWarning, KeyError, Rule, WarningKind};
pub use layer::{Layered, NodeEntry};
pub use node::{EffectiveNodeConfig, NodeNote, resolve_node};
pub use parse::{KeyParse, ParsedConfig, SloConfig};
pub use pod_burst::{BurstSource, PodBurstDecision, resolve_pod_burst, resolve_pod_burst_for};
pub use types::{
    CpuBurstCfg, CpuNormalizationStrategy, HostApplicationCfg, ModelRatioCfg, ResourceAmplificationStrategy,
    ResourceQosCfg, ResourceThresholdCfg, SystemCfg,
};

use crate::names;

/// The keys of the `slo-controller-config` ConfigMap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ConfigKey {
    /// `colocation-config`.
    Colocation,
    /// `resource-threshold-config`.
    ResourceThreshold,
    /// `resource-qos-config`.
    ResourceQos,
    /// `cpu-burst-config`.
    CpuBurst,
    /// `system-config`.
    System,
    /// `host-application-config`.
    HostApplication,
    /// `cpu-normalization-config`.
    CpuNormalization,
    /// `resource-amplification-config`.
    ResourceAmplification,
}

impl ConfigKey {
    /// Every key, in a stable order.
    pub const ALL: [ConfigKey; 8] = [
        ConfigKey::Colocation,
        ConfigKey::ResourceThreshold,
        ConfigKey::ResourceQos,
        ConfigKey::CpuBurst,
        ConfigKey::System,
        ConfigKey::HostApplication,
        ConfigKey::CpuNormalization,
        ConfigKey::ResourceAmplification,
    ];

    /// The key as it appears in the ConfigMap `data`.
    pub fn name(self) -> &'static str {
        match self {
            ConfigKey::Colocation => names::KEY_COLOCATION_CONFIG,
            ConfigKey::ResourceThreshold => names::KEY_RESOURCE_THRESHOLD_CONFIG,
            ConfigKey::ResourceQos => names::KEY_RESOURCE_QOS_CONFIG,
            ConfigKey::CpuBurst => names::KEY_CPU_BURST_CONFIG,
            ConfigKey::System => names::KEY_SYSTEM_CONFIG,
            ConfigKey::HostApplication => names::KEY_HOST_APPLICATION_CONFIG,
            ConfigKey::CpuNormalization => names::KEY_CPU_NORMALIZATION_CONFIG,
            ConfigKey::ResourceAmplification => names::KEY_RESOURCE_AMPLIFICATION_CONFIG,
        }
    }

    /// The key for a ConfigMap data key name, if it is one of ours.
    pub fn from_name(name: &str) -> Option<Self> {
        ConfigKey::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The JSON field holding the node entries (`nodeStrategies` or `nodeConfigs`).
    pub fn nodes_field(self) -> &'static str {
        match self {
            ConfigKey::ResourceThreshold
            | ConfigKey::ResourceQos
            | ConfigKey::CpuBurst
            | ConfigKey::System => "nodeStrategies",
            _ => "nodeConfigs",
        }
    }

    /// The JSON path of the cluster strategy (empty for flat keys).
    pub fn cluster_path(self) -> &'static str {
        match self {
            ConfigKey::ResourceThreshold
            | ConfigKey::ResourceQos
            | ConfigKey::CpuBurst
            | ConfigKey::System => "clusterStrategy",
            ConfigKey::HostApplication => "applications",
            _ => "",
        }
    }
}

impl fmt::Display for ConfigKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
