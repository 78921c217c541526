//! Wire types of the `slo-controller-config` keys other than `colocation-config`.
//!
//! The strategies themselves are the NodeSLO types of [`crate::nodeslo`]; here are only the
//! ConfigMap envelopes (`clusterStrategy` + `nodeStrategies[]`) and the two flat keys that have
//! no NodeSLO counterpart (CPU normalization, resource amplification). These types fix the
//! field names and JSON types; the merge itself works on canonical JSON values (see
//! [`super::parse`]).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::nodeslo::{
    CpuBurstPodStrategy, CpuBurstStrategy, HostApplicationSpec, ResourceQosStrategy,
    ResourceThresholdStrategy, SystemStrategy,
};

/// A `nodeStrategies[]` entry: optional name, node selector, and strategy fields inline.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeStrategyEntry<S> {
    /// Optional identifier of the entry (required to be unique only with the webhook's name check).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Which nodes the entry applies to; unset matches nothing, `{}` matches all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
    /// The strategy fields, inline.
    #[serde(flatten)]
    pub strategy: S,
}

/// `clusterStrategy` + `nodeStrategies[]`, the shape of threshold, QoS and system keys.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StrategyCfg<S> {
    /// Applies to every node, over the built-in default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_strategy: Option<S>,
    /// Node overrides, each over the merged cluster strategy; the first matching entry wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_strategies: Option<Vec<NodeStrategyEntry<S>>>,
}

/// `resource-threshold-config`.
pub type ResourceThresholdCfg = StrategyCfg<ResourceThresholdStrategy>;
/// `resource-qos-config`.
pub type ResourceQosCfg = StrategyCfg<ResourceQosStrategy>;
/// `system-config`.
pub type SystemCfg = StrategyCfg<SystemStrategy>;

/// A `cpu-burst-config` node entry. Besides upstream's inline form it accepts the nested form of
/// seed 000 (`{"nodeSelector":..,"cpuBurstStrategy":{..}}`, which upstream silently ignores);
/// when both are given the nested fields overlay the inline ones.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CpuBurstNodeEntry {
    /// Optional identifier of the entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Which nodes the entry applies to; unset matches nothing, `{}` matches all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
    /// Nested form of the strategy (seed 000); overlays the inline fields.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_burst_strategy: Option<CpuBurstStrategy>,
    /// The strategy fields, inline (upstream's form).
    #[serde(flatten)]
    pub strategy: CpuBurstStrategy,
}

/// `cpu-burst-config`, with the pod-level strategies of seed 000 at the top level.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CpuBurstCfg {
    /// Applies to every node, over the built-in default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_strategy: Option<CpuBurstStrategy>,
    /// Node overrides; the first matching entry wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_strategies: Option<Vec<CpuBurstNodeEntry>>,
    /// Pod-level strategies copied into every NodeSLO (`cpuBurstStrategy.podStrategies`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_strategies: Option<Vec<CpuBurstPodStrategy>>,
}

/// A `host-application-config` node entry: its list replaces the cluster list.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostApplicationNodeCfg {
    /// Optional identifier of the entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Which nodes the entry applies to; unset matches nothing, `{}` matches all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
    /// The applications of matching nodes (unset = none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applications: Option<Vec<HostApplicationSpec>>,
}

/// `host-application-config`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostApplicationCfg {
    /// Applications of every node without a matching node entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applications: Option<Vec<HostApplicationSpec>>,
    /// Node overrides; the first matching entry wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_configs: Option<Vec<HostApplicationNodeCfg>>,
}

/// Normalization ratios of one CPU model.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelRatioCfg {
    /// Ratio without hyper-threading and turbo.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_ratio: Option<f64>,
    /// Ratio with hyper-threading.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hyper_thread_enabled_ratio: Option<f64>,
    /// Ratio with turbo.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turbo_enabled_ratio: Option<f64>,
    /// Ratio with both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hyper_thread_turbo_enabled_ratio: Option<f64>,
}

/// CPU normalization strategy (`cpu-normalization-config`), flat with `nodeConfigs`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CpuNormalizationStrategy {
    /// Turns normalization on. Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable: Option<bool>,
    /// Ratio for CPU models without an entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_ratio: Option<f64>,
    /// Ratios per CPU model name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ratio_model: Option<BTreeMap<String, ModelRatioCfg>>,
}

/// Resource amplification strategy (`resource-amplification-config`), flat with `nodeConfigs`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceAmplificationStrategy {
    /// Turns amplification on. Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable: Option<bool>,
    /// Amplification ratio per resource name (>= 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_amplification_ratio: Option<BTreeMap<String, f64>>,
}

/// A flat key's node entry: selector plus strategy fields inline.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlatNodeCfg<S> {
    /// Optional identifier of the entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Which nodes the entry applies to; unset matches nothing, `{}` matches all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
    /// The strategy fields, inline.
    #[serde(flatten)]
    pub strategy: S,
}

/// A flat key (strategy fields at the top level) with `nodeConfigs[]`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlatCfg<S> {
    /// The cluster strategy, flat at the top level.
    #[serde(flatten)]
    pub strategy: S,
    /// Node overrides; the first matching entry wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_configs: Option<Vec<FlatNodeCfg<S>>>,
}

/// `cpu-normalization-config`.
pub type CpuNormalizationCfg = FlatCfg<CpuNormalizationStrategy>;
/// `resource-amplification-config`.
pub type ResourceAmplificationCfg = FlatCfg<ResourceAmplificationStrategy>;
