//! Pod-level CPU burst (seed 000): which burst config a pod gets on a node.
//!
//! Order of precedence:
//! - the first pod strategy that matches the pod (namespace unset or empty = any; `podSelector` unset or
//!   `{}` = every pod) decides: with `overridePod: true` it is laid over the pod's
//!   `koordinator.sh/cpuBurst` annotation (the strategy wins), with `false` (or unset) the
//!   annotation is laid over the strategy (the annotation wins); both over the node config;
//! - no strategy matches: the node config with the annotation laid over it (upstream koordlet);
//! - an annotation that is not valid JSON is ignored and the reason returned.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;

use super::canonical::canonicalize;
use crate::names::ANNOTATION_CPU_BURST;
use crate::nodeslo::{CpuBurstConfig, CpuBurstStrategy};
use crate::selector::Selector;

/// Which source decided a pod's burst config (for the "which strategy was picked" log line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BurstSource {
    /// Pod strategy `index` matched; `override_pod` says whether it beat the annotation.
    PodStrategy {
        /// Position in `podStrategies`.
        index: usize,
        /// The strategy's `overridePod`.
        override_pod: bool,
        /// Whether a (valid) annotation took part.
        with_annotation: bool,
    },
    /// No strategy matched; the pod annotation was laid over the node config.
    PodAnnotation,
    /// No strategy matched and no usable annotation: the node config as is.
    Node,
}

/// The effective burst config of a pod, and how it was decided.
#[derive(Debug, Clone, PartialEq)]
pub struct PodBurstDecision {
    /// The config to apply.
    pub config: CpuBurstConfig,
    /// Which source decided.
    pub source: BurstSource,
    /// Why the annotation was ignored, when it was present but unusable.
    pub annotation_error: Option<String>,
    /// Pod strategies skipped because their selector does not parse: (index, reason).
    pub skipped_strategies: Vec<(usize, String)>,
}

/// `base` with every field `overlay` sets replaced.
fn overlay(base: &CpuBurstConfig, top: &CpuBurstConfig) -> CpuBurstConfig {
    CpuBurstConfig {
        policy: top.policy.or(base.policy),
        cpu_burst_percent: top.cpu_burst_percent.or(base.cpu_burst_percent),
        cfs_quota_burst_percent: top.cfs_quota_burst_percent.or(base.cfs_quota_burst_percent),
        cfs_quota_burst_period_seconds: top
            .cfs_quota_burst_period_seconds
            .or(base.cfs_quota_burst_period_seconds),
    }
}

fn parse_annotation(raw: &str) -> Result<CpuBurstConfig, String> {
    let mut v: Value = serde_json::from_str(raw).map_err(|e| format!("invalid JSON: {e}"))?;
    canonicalize::<CpuBurstConfig>(&mut v, ANNOTATION_CPU_BURST, "");
    serde_json::from_value(v).map_err(|e| e.to_string())
}

/// Resolves the burst config of a pod (given by namespace, labels and annotations) on a node
/// whose NodeSLO carries `node` (with its `podStrategies`). Pure: koordlet calls it during its
/// pod scan, tests call it with plain maps.
pub fn resolve_pod_burst(
    node: &CpuBurstStrategy,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> PodBurstDecision {
    let node_cfg = node.config();
    let (annotation, annotation_error) =
        match annotations.get(ANNOTATION_CPU_BURST).map(|a| parse_annotation(a)) {
            Some(Ok(cfg)) => (Some(cfg), None),
            Some(Err(e)) => (None, Some(e)),
            None => (None, None),
        };
    let mut skipped_strategies = Vec::new();
    for (index, strategy) in node.pod_strategies.iter().flatten().enumerate() {
        if strategy
            .namespace
            .as_deref()
            .is_some_and(|ns| !ns.is_empty() && ns != namespace)
        {
            continue;
        }
        let selected = match &strategy.pod_selector {
            None => true,
            Some(sel) => match Selector::parse(sel) {
                Ok(s) => s.matches(labels),
                Err(e) => {
                    skipped_strategies.push((index, e.to_string()));
                    false
                }
            },
        };
        if !selected {
            continue;
        }
        let override_pod = strategy.override_pod.unwrap_or(false);
        let from_strategy = strategy.cpu_burst_config.clone().unwrap_or_default();
        let with_strategy = overlay(&node_cfg, &from_strategy);
        let config = match (&annotation, override_pod) {
            (Some(a), true) => overlay(&overlay(&node_cfg, a), &from_strategy),
            (Some(a), false) => overlay(&with_strategy, a),
            (None, _) => with_strategy,
        };
        let source = BurstSource::PodStrategy {
            index,
            override_pod,
            with_annotation: annotation.is_some(),
        };
        return PodBurstDecision {
            config,
            source,
            annotation_error,
            skipped_strategies,
        };
    }
    let (config, source) = match &annotation {
        Some(a) => (overlay(&node_cfg, a), BurstSource::PodAnnotation),
        None => (node_cfg, BurstSource::Node),
    };
    PodBurstDecision {
        config,
        source,
        annotation_error,
        skipped_strategies,
    }
}

/// [`resolve_pod_burst`] for a Kubernetes Pod object.
pub fn resolve_pod_burst_for(node: &CpuBurstStrategy, pod: &Pod) -> PodBurstDecision {
    let empty = BTreeMap::new();
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
    let annotations = pod.metadata.annotations.as_ref().unwrap_or(&empty);
    resolve_pod_burst(node, namespace, labels, annotations)
}
