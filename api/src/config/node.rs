//! The per-node result: which strategies a Node gets, and its NodeSLO spec (upstream's
//! `getNodeSLOSpec` and `GetNodeColocationStrategy`).
//!
//! Node-level overrides that upstream honours are applied here: the colocation-strategy
//! annotation, the reclaim-ratio labels and the network-bandwidth annotation. Where upstream
//! would silently accept or drop things, we decide deliberately and leave a [`NodeNote`]:
//! - an annotation or label that does not parse, or would push a field out of its valid range,
//!   is ignored (the ConfigMap value stays) — upstream leaves the colocation annotation
//!   unvalidated;
//! - an unparsable `node.koordinator.sh/network-bandwidth` keeps the ConfigMap's
//!   `totalNetworkBandwidth` (upstream drops the whole system strategy from the NodeSLO, which
//!   would also lose every sysctl setting of the node because of one bad annotation).

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::Value;

use super::ConfigKey;
use super::canonical::canonicalize;
use super::colocation::ColocationStrategy;
use super::error::KeyError;
use super::layer::deep_merge;
use super::parse::SloConfig;
use super::syntax::is_non_negative_quantity;
use super::types::{CpuNormalizationStrategy, ResourceAmplificationStrategy};
use super::validate::{self, Check};
use crate::names;
use crate::nodeslo::{
    CpuBurstStrategy, HostApplicationSpec, NodeSLOSpec, ResourceQosStrategy, ResourceThresholdStrategy,
    SystemStrategy,
};

/// A node-level override that was not applied, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeNote {
    /// The annotation or label.
    pub source: &'static str,
    /// Why it was ignored.
    pub reason: String,
}

impl fmt::Display for NodeNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ignored: {}", self.source, self.reason)
    }
}

/// Everything one Node gets from the ConfigMap, fully merged.
#[derive(Debug, Clone, PartialEq)]
pub struct EffectiveNodeConfig {
    /// Colocation strategy after node entry, annotation and labels.
    pub colocation: ColocationStrategy,
    /// BE suppress/evict thresholds.
    pub resource_threshold: ResourceThresholdStrategy,
    /// Per-class cgroup QoS.
    pub resource_qos: ResourceQosStrategy,
    /// CPU burst, including the pod strategies.
    pub cpu_burst: CpuBurstStrategy,
    /// Sysctls, with the bandwidth annotation applied.
    pub system: SystemStrategy,
    /// Host applications (empty when none).
    pub host_applications: Vec<HostApplicationSpec>,
    /// CPU normalization.
    pub cpu_normalization: CpuNormalizationStrategy,
    /// Resource amplification.
    pub resource_amplification: ResourceAmplificationStrategy,
    /// Index of the node entry that decided each key (absent = cluster strategy), for logs.
    pub matched_entries: BTreeMap<ConfigKey, usize>,
    /// Node annotations/labels that were ignored.
    pub notes: Vec<NodeNote>,
}

impl EffectiveNodeConfig {
    /// The NodeSLO spec for the node. `extensions` is left unset: it belongs to plugins, and
    /// the manager carries the old spec's extensions over itself.
    pub fn node_slo_spec(&self) -> NodeSLOSpec {
        NodeSLOSpec {
            resource_used_threshold_with_be: Some(self.resource_threshold.clone()),
            resource_qos_strategy: Some(self.resource_qos.clone()),
            cpu_burst_strategy: Some(self.cpu_burst.clone()),
            system_strategy: Some(self.system.clone()),
            extensions: None,
            host_applications: Some(self.host_applications.clone()),
        }
    }
}

/// Labels that override colocation percentages: `int64(ratio × 100)`, truncated like upstream.
/// Picks the colocation field a label overrides.
type FieldOf = fn(&mut ColocationStrategy) -> &mut Option<i64>;

const RATIO_LABELS: [(&str, FieldOf, i64); 4] = [
    (
        names::LABEL_CPU_RECLAIM_RATIO,
        |s| &mut s.cpu_reclaim_threshold_percent,
        1_000_000,
    ),
    (
        names::LABEL_MEMORY_RECLAIM_RATIO,
        |s| &mut s.memory_reclaim_threshold_percent,
        1_000_000,
    ),
    (
        names::LABEL_MID_STATIC_CPU_RESERVED_RATIO,
        |s| &mut s.mid_static_cpu_reserved_percent,
        100,
    ),
    (
        names::LABEL_MID_STATIC_MEMORY_RESERVED_RATIO,
        |s| &mut s.mid_static_memory_reserved_percent,
        100,
    ),
];

fn colocation_for_node(
    base: &ColocationStrategy,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
    notes: &mut Vec<NodeNote>,
) -> ColocationStrategy {
    let mut strategy = base.clone();
    if let Some(raw) = annotations.get(names::ANNOTATION_NODE_COLOCATION_STRATEGY) {
        let source = names::ANNOTATION_NODE_COLOCATION_STRATEGY;
        match annotated_colocation(base, raw) {
            Ok(s) => strategy = s,
            Err(reason) => notes.push(NodeNote { source, reason }),
        }
    }
    for (label, field, max) in RATIO_LABELS {
        let Some(raw) = labels.get(label) else { continue };
        match raw.trim().parse::<f64>() {
            Ok(ratio) if ratio.is_finite() && ratio >= 0.0 && ratio * 100.0 <= max as f64 => {
                // Truncation on purpose: upstream computes int64(ratio*100), so 0.29 gives 28.
                *field(&mut strategy) = Some((ratio * 100.0).trunc() as i64);
            }
            _ => notes.push(NodeNote {
                source: label,
                reason: format!("{raw:?} is not a ratio between 0 and {}", max / 100),
            }),
        }
    }
    strategy
}

fn annotated_colocation(base: &ColocationStrategy, raw: &str) -> Result<ColocationStrategy, String> {
    let mut overlay: Value = serde_json::from_str(raw).map_err(|e| format!("invalid JSON: {e}"))?;
    if !overlay.is_object() {
        return Err("expected a JSON object".to_owned());
    }
    canonicalize::<ColocationStrategy>(&mut overlay, names::ANNOTATION_NODE_COLOCATION_STRATEGY, "");
    let mut merged = serde_json::to_value(base).map_err(|e| e.to_string())?;
    deep_merge(&mut merged, &overlay);
    let strategy: ColocationStrategy = serde_json::from_value(merged).map_err(|e| e.to_string())?;
    let mut errors = Vec::new();
    validate::colocation(
        &strategy,
        &mut Check {
            key: ConfigKey::Colocation,
            base: String::new(),
            errors: &mut errors,
        },
    );
    match errors.first() {
        Some(e) => Err(format!("{}: {}", e.path, e.rule)),
        None => Ok(strategy),
    }
}

impl SloConfig {
    /// The effective strategies of `node`: per key the first matching node entry (else the
    /// cluster strategy), then the node annotations and labels upstream honours.
    pub fn for_node(&self, node: &Node) -> EffectiveNodeConfig {
        let empty = BTreeMap::new();
        let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
        let annotations = node.metadata.annotations.as_ref().unwrap_or(&empty);
        let mut matched = BTreeMap::new();
        let mut record = |key: ConfigKey, idx: Option<usize>| {
            if let Some(i) = idx {
                matched.insert(key, i);
            }
        };
        let mut notes = Vec::new();

        let (coloc, i) = self.colocation.for_labels(labels);
        record(ConfigKey::Colocation, i);
        let colocation = colocation_for_node(coloc, labels, annotations, &mut notes);
        let (threshold, i) = self.resource_threshold.for_labels(labels);
        record(ConfigKey::ResourceThreshold, i);
        let (qos, i) = self.resource_qos.for_labels(labels);
        record(ConfigKey::ResourceQos, i);
        let (burst, i) = self.cpu_burst.for_labels(labels);
        record(ConfigKey::CpuBurst, i);
        let (system, i) = self.system.for_labels(labels);
        record(ConfigKey::System, i);
        let mut system = system.clone();
        if let Some(bw) = annotations.get(names::ANNOTATION_NETWORK_BANDWIDTH) {
            if is_non_negative_quantity(bw) {
                system.total_network_bandwidth = Quantity(bw.trim().to_owned());
            } else {
                notes.push(NodeNote {
                    source: names::ANNOTATION_NETWORK_BANDWIDTH,
                    reason: format!(
                        "{bw:?} is not a valid non-negative quantity; keeping the ConfigMap value"
                    ),
                });
            }
        }
        let (apps, i) = self.host_application.for_labels(labels);
        record(ConfigKey::HostApplication, i);
        let (norm, i) = self.cpu_normalization.for_labels(labels);
        record(ConfigKey::CpuNormalization, i);
        let (amp, i) = self.resource_amplification.for_labels(labels);
        record(ConfigKey::ResourceAmplification, i);

        EffectiveNodeConfig {
            colocation,
            resource_threshold: threshold.clone(),
            resource_qos: qos.clone(),
            cpu_burst: burst.clone(),
            system,
            host_applications: apps.clone(),
            cpu_normalization: norm.clone(),
            resource_amplification: amp.clone(),
            matched_entries: matched,
            notes,
        }
    }
}

/// ConfigMap `data` + Node → the node's effective strategies (and, through
/// [`EffectiveNodeConfig::node_slo_spec`], its NodeSLO spec). Fails if any key is broken; the
/// manager, which must keep last good values instead, uses [`SloConfig::parse`],
/// [`super::ParsedConfig::merge_with_last_good`] and [`SloConfig::for_node`].
pub fn resolve_node(
    data: &BTreeMap<String, String>,
    node: &Node,
) -> Result<EffectiveNodeConfig, Vec<KeyError>> {
    Ok(SloConfig::parse(data).into_config()?.for_node(node))
}
