//! One filter or prioritize call: the cache's objects → facts → [`crate::decide`] → the wire
//! answer, with every decision logged at debug level.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;

use crate::cluster::{ClusterCache, degrade_time_minutes};
use crate::decide::{self, MetricFacts, NodeFacts, PodFacts, Policy};
use crate::facts::{NodeEntry, ScalingFactors, node_entry, node_facts, pod_facts};
use crate::metrics::ExtenderMetrics;
use crate::wire::{ExtenderArgs, ExtenderFilterResult, HostPriority, RawNodeList};

/// The decision maker behind the HTTP routes.
#[derive(Clone)]
pub struct Extender {
    /// The cluster caches.
    pub cache: ClusterCache,
    /// Thresholds and weights.
    pub policy: Policy,
    /// Usage estimation.
    pub factors: ScalingFactors,
    /// Metrics.
    pub metrics: ExtenderMetrics,
}

impl Extender {
    fn pod_name(args: &ExtenderArgs) -> String {
        format!(
            "{}/{}",
            args.pod.metadata.namespace.as_deref().unwrap_or_default(),
            args.pod.metadata.name.as_deref().unwrap_or_default()
        )
    }

    /// Facts of every candidate, in order. A node missing from the cache (just created) is
    /// taken from the request's objects when sent, else judged with no allocatable.
    fn candidates(&self, args: &ExtenderArgs) -> Vec<NodeFacts> {
        let config = self
            .cache
            .slo_config
            .read()
            .unwrap_or_else(|poison| poison.into_inner());
        let sent = |name: &str| -> NodeEntry {
            args.nodes
                .as_ref()
                .and_then(|list| list.items.iter().find(|raw| RawNodeList::name_of(raw) == name))
                .and_then(|raw| serde_json::from_value::<Node>(raw.clone()).ok())
                .map(|node| node_entry(&node))
                .unwrap_or_default()
        };
        self.cache.nodes.read(|nodes| {
            self.cache.node_metrics.read(|metrics| {
                self.cache.pods.read(|ledger| {
                    args.candidate_names()
                        .into_iter()
                        .map(|name| {
                            let fallback;
                            let node = match nodes.get(name) {
                                Some(node) => node,
                                None => {
                                    fallback = sent(name);
                                    &fallback
                                }
                            };
                            let metric = metrics.get(name).copied().unwrap_or(MetricFacts::Missing);
                            let reported_at = match metric {
                                MetricFacts::Reported { update_time, .. }
                                | MetricFacts::NoNodeUsage { update_time } => Some(update_time),
                                MetricFacts::Missing | MetricFacts::NeverReported => None,
                            };
                            let (batch_requested, unreported) = ledger.node_totals(name, reported_at);
                            node_facts(
                                name,
                                node,
                                metric,
                                batch_requested,
                                unreported,
                                degrade_time_minutes(&config, &node.labels),
                            )
                        })
                        .collect()
                })
            })
        })
    }

    /// Answers a filter call.
    pub fn filter(&self, args: &ExtenderArgs, now: Timestamp) -> ExtenderFilterResult {
        let pod = pod_facts(&args.pod, self.factors);
        let pod_name = Self::pod_name(args);
        let mut result = ExtenderFilterResult::default();
        let mut passed = Vec::new();
        for node in self.candidates(args) {
            match decide::filter(&pod, &node, &self.policy, now) {
                Ok(()) => passed.push(node.name),
                Err(unfit) => {
                    tracing::debug!(pod = %pod_name, kind = ?pod.kind, node = %node.name, reason = unfit.reason.label(), message = %unfit.message, "node filtered out");
                    self.metrics.filtered(unfit.reason.label());
                    if unfit.reason.unresolvable() {
                        result
                            .failed_and_unresolvable_nodes
                            .insert(node.name, unfit.message);
                    } else {
                        result.failed_nodes.insert(node.name, unfit.message);
                    }
                }
            }
        }
        tracing::debug!(pod = %pod_name, kind = ?pod.kind, passed = passed.len(), failed = result.failed_nodes.len() + result.failed_and_unresolvable_nodes.len(), "filter");
        match &args.nodes {
            Some(list) if args.node_names.is_none() => {
                let keep: std::collections::HashSet<&str> = passed.iter().map(String::as_str).collect();
                result.nodes = Some(RawNodeList {
                    items: list
                        .items
                        .iter()
                        .filter(|raw| keep.contains(RawNodeList::name_of(raw)))
                        .cloned()
                        .collect(),
                });
            }
            _ => result.node_names = Some(passed),
        }
        result
    }

    /// Answers a prioritize call (scores 0..=10, the extender API's scale).
    pub fn prioritize(&self, args: &ExtenderArgs, now: Timestamp) -> Vec<HostPriority> {
        let pod: PodFacts = pod_facts(&args.pod, self.factors);
        let nodes = self.candidates(args);
        let scores = decide::prioritize(&pod, &nodes, &self.policy, now);
        let debug = tracing::enabled!(tracing::Level::DEBUG);
        let pod_name = if debug {
            Self::pod_name(args)
        } else {
            String::new()
        };
        nodes
            .into_iter()
            .zip(scores)
            .map(|(node, score)| {
                if debug {
                    tracing::debug!(pod = %pod_name, kind = ?pod.kind, node = %node.name, total = score.total, headroom = ?score.headroom, load = score.load, priority = score.extender_priority(), "node scored");
                }
                HostPriority {
                    host: node.name,
                    score: score.extender_priority(),
                }
            })
            .collect()
    }
}
