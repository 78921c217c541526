//! Prometheus metrics of the manager: ours under `koord_manager_`, upstream slo-controller's
//! under their names (`slo_controller_*`), and the leader gauge controller-runtime serves
//! (`leader_election_master_status`).

use std::{sync::atomic::AtomicU64, time::Instant};

use koord_api::names;
use koord_runtime::UnsuffixedCounter;

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

/// Labels naming a controller.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    /// `nodeslo`, `nodemetric` or `noderesource`.
    pub controller: String,
}

/// Labels of a failed reconcile.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// The controller.
    pub controller: String,
    /// The error's category.
    pub error: String,
}

/// Labels of a node.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeLabels {
    /// Node name.
    pub node: String,
}

/// Labels of a NUMA zone of a node.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ZoneLabels {
    /// Node name.
    pub node: String,
    /// Zone name as the NodeResourceTopology has it (`node-0`).
    pub zone: String,
}

/// Labels of upstream's `slo_controller_node_extended_resource_allocatable_internal`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ExtendedResourceLabels {
    /// Node name.
    pub node: String,
    /// `kubernetes.io/batch-cpu` or `kubernetes.io/batch-memory`.
    pub resource: String,
    /// `integer` (batch-cpu: a count of milli-cores) or `byte`, as upstream.
    pub unit: String,
}

/// Labels of upstream's `slo_controller_*_reconcile_count`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatusLabels {
    /// `succeeded` or `failed`.
    pub status: String,
    /// `reconciled`, or the error category (`kube`, `field`, `unnamed`).
    pub reason: String,
}

/// Labels of an API resource the manager writes.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabels {
    /// `nodes`, `nodes/status`, `nodeslos` or `nodemetrics`.
    pub resource: String,
}

/// Labels of the leader gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LeaseLabels {
    /// The Lease name.
    pub name: String,
}

/// A gauge of base units.
type FloatGauge = Gauge<f64, AtomicU64>;

/// Labels of a ConfigMap key.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KeyLabels {
    /// The `slo-controller-config` key.
    pub key: String,
}

/// Every metric the manager exports.
pub struct Metrics {
    /// Reconciles run, per controller.
    pub reconciles: Family<ControllerLabels, Counter>,
    /// Reconciles failed, per controller and error category.
    pub reconcile_errors: Family<ErrorLabels, Counter>,
    /// Reconcile duration in seconds, per controller.
    pub reconcile_duration: Family<ControllerLabels, Histogram, fn() -> Histogram>,
    /// Published batch-cpu (after third-party allocations), cores, per node.
    pub batch_cpu_allocatable: Family<NodeLabels, FloatGauge>,
    /// Published batch-memory (after third-party allocations), bytes, per node.
    pub batch_memory_allocatable: Family<NodeLabels, FloatGauge>,
    /// Upstream's: the batch allocatable computed for a node, whether written or not.
    pub extended_resource_allocatable: Family<ExtendedResourceLabels, FloatGauge>,
    /// Upstream's reconcile counters, one per controller.
    pub upstream_reconciles: [Family<StatusLabels, UnsuffixedCounter>; 3],
    /// Upstream's `nodeslo_spec_parse_count` and `nodemetric_spec_parse_count`: ConfigMap keys
    /// parsed into the NodeSLO / NodeMetric spec, by status and key.
    pub upstream_spec_parses: [Family<StatusLabels, UnsuffixedCounter>; 2],
    /// 1 while this replica holds the leader Lease (or runs without election), else 0.
    pub leader: Family<LeaseLabels, Gauge>,
    /// 1 while a ConfigMap key is broken (its last good value stays in force).
    pub config_key_invalid: Family<KeyLabels, Gauge>,
    /// Node status writes of batch resources.
    pub batch_writes: Counter,
    /// NodeResourceTopology writes of the NUMA zones' batch resources.
    pub zone_batch_writes: Counter,
    /// batch-cpu a NUMA zone's entries last said after our write, cores, per node and zone.
    pub zone_batch_cpu_allocatable: Family<ZoneLabels, FloatGauge>,
    /// batch-memory a NUMA zone's entries last said after our write, bytes, per node and zone.
    pub zone_batch_memory_allocatable: Family<ZoneLabels, FloatGauge>,
    /// Pods held in the noderesource pod index (shows when the initial list is in).
    pub pods_indexed: Gauge,
    /// Applies that met fields another field manager had changed (then taken back by a
    /// forced apply), per resource.
    pub apply_conflicts: Family<ResourceLabels, Counter>,
    /// The nodes with per-node series, each with the zones it has zone gauges for (so that a
    /// deleted node's series can go). The node resource controller records every node it
    /// reconciles here first ([`Metrics::batch_computed`]), before it keeps any state of it.
    nodes: std::sync::Mutex<std::collections::HashMap<String, std::collections::BTreeSet<String>>>,
    /// CPU normalization ratio batch-cpu is multiplied by, per node.
    pub cpu_normalization_ratio: Family<NodeLabels, FloatGauge>,
    /// 1 while normalization is on for a node but no ratio can be decided, else 0.
    pub cpu_normalization_undecided: Family<NodeLabels, Gauge>,
}

/// Our controller names and upstream's metric infixes, in the order of
/// [`Metrics::upstream_reconciles`].
const UPSTREAM_CONTROLLERS: [(&str, &str); 3] = [
    ("nodeslo", "nodeslo"),
    ("nodemetric", "nodemetric"),
    ("noderesource", "node_resource"),
];

fn duration_histogram() -> Histogram {
    Histogram::new([
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    ])
}

impl Metrics {
    /// Creates the metrics and registers them in `registry`, a root registry (the upstream
    /// names carry no `koord_manager_` prefix).
    pub fn register(registry: &mut Registry) -> Metrics {
        let metrics = Metrics {
            reconciles: Family::default(),
            reconcile_errors: Family::default(),
            reconcile_duration: Family::new_with_constructor(duration_histogram as fn() -> Histogram),
            batch_cpu_allocatable: Family::default(),
            batch_memory_allocatable: Family::default(),
            extended_resource_allocatable: Family::default(),
            upstream_reconciles: Default::default(),
            upstream_spec_parses: Default::default(),
            leader: Family::default(),
            config_key_invalid: Family::default(),
            batch_writes: Counter::default(),
            zone_batch_writes: Counter::default(),
            zone_batch_cpu_allocatable: Family::default(),
            zone_batch_memory_allocatable: Family::default(),
            nodes: Default::default(),
            pods_indexed: Gauge::default(),
            apply_conflicts: Family::default(),
            cpu_normalization_ratio: Family::default(),
            cpu_normalization_undecided: Family::default(),
        };
        registry.register(
            "leader_election_master_status",
            "1 while this replica holds the leader Lease (or runs without leader election), else 0",
            metrics.leader.clone(),
        );
        {
            let upstream = registry.sub_registry_with_prefix("slo_controller");
            upstream.register(
                "node_extended_resource_allocatable_internal",
                "Batch allocatable computed for the node, whether written or not \
                 (batch-cpu: unit integer, milli-cores; batch-memory: bytes)",
                metrics.extended_resource_allocatable.clone(),
            );
            for (spec, family) in ["nodeslo", "nodemetric"]
                .iter()
                .zip(&metrics.upstream_spec_parses)
            {
                upstream.register(
                    format!("{spec}_spec_parse_count"),
                    format!("ConfigMap keys parsed into the {spec} spec, by status and reason (the key)"),
                    family.clone(),
                );
            }
            for (controller, family) in UPSTREAM_CONTROLLERS.iter().zip(&metrics.upstream_reconciles) {
                upstream.register(
                    format!("{}_reconcile_count", controller.1),
                    format!(
                        "Reconciles of the {} controller, by status and reason",
                        controller.0
                    ),
                    family.clone(),
                );
            }
        }
        let registry = registry.sub_registry_with_prefix("koord_manager");
        registry.register(
            "reconciles",
            "Reconciles run, per controller",
            metrics.reconciles.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Reconciles failed, per controller and error",
            metrics.reconcile_errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Reconcile duration, per controller",
            metrics.reconcile_duration.clone(),
        );
        registry.register(
            "batch_cpu_allocatable_cores",
            "batch-cpu last published on the node, in cores",
            metrics.batch_cpu_allocatable.clone(),
        );
        registry.register(
            "batch_memory_allocatable_bytes",
            "batch-memory last published on the node, in bytes",
            metrics.batch_memory_allocatable.clone(),
        );
        registry.register(
            "config_key_invalid",
            "1 while a slo-controller-config key is invalid (its last good value stays in force)",
            metrics.config_key_invalid.clone(),
        );
        registry.register(
            "batch_writes",
            "Node status writes of batch resources",
            metrics.batch_writes.clone(),
        );
        registry.register(
            "zone_batch_writes",
            "NodeResourceTopology writes of the NUMA zones' batch resources",
            metrics.zone_batch_writes.clone(),
        );
        registry.register(
            "zone_batch_cpu_allocatable_cores",
            "batch-cpu of the NUMA zone in the node's NodeResourceTopology after our last write, in cores",
            metrics.zone_batch_cpu_allocatable.clone(),
        );
        registry.register(
            "zone_batch_memory_allocatable_bytes",
            "batch-memory of the NUMA zone in the node's NodeResourceTopology after our last write, in bytes",
            metrics.zone_batch_memory_allocatable.clone(),
        );
        registry.register(
            "pods_indexed",
            "Pods held in the noderesource pod index",
            metrics.pods_indexed.clone(),
        );
        registry.register(
            "apply_conflicts",
            "Applies that met fields another field manager had changed; the forced apply took them back",
            metrics.apply_conflicts.clone(),
        );
        registry.register(
            "cpu_normalization_ratio",
            "CPU normalization ratio batch-cpu is multiplied by on the node (1 when off)",
            metrics.cpu_normalization_ratio.clone(),
        );
        registry.register(
            "cpu_normalization_undecided",
            "1 while CPU normalization is on for the node but no ratio can be decided (see the log), else 0",
            metrics.cpu_normalization_undecided.clone(),
        );
        metrics
    }

    /// Counts a reconcile and returns a guard that records its duration when dropped.
    pub fn reconcile_started(&self, controller: &str) -> ReconcileTimer<'_> {
        let labels = ControllerLabels {
            controller: controller.to_owned(),
        };
        self.reconciles.get_or_create(&labels).inc();
        ReconcileTimer {
            metrics: self,
            labels,
            start: Instant::now(),
        }
    }

    /// Counts a finished reconcile in upstream's `slo_controller_*_reconcile_count`;
    /// `error` is the failure's category (`None`: succeeded).
    pub fn reconcile_finished(&self, controller: &str, error: Option<&str>) {
        let Some(family) = UPSTREAM_CONTROLLERS
            .iter()
            .position(|(ours, _)| *ours == controller)
            .and_then(|i| self.upstream_reconciles.get(i))
        else {
            return;
        };
        let labels = match error {
            None => StatusLabels {
                status: "succeeded".to_owned(),
                reason: "reconciled".to_owned(),
            },
            Some(category) => StatusLabels {
                status: "failed".to_owned(),
                reason: category.to_owned(),
            },
        };
        family.get_or_create(&labels).inc();
    }

    /// Counts a write (or a failed attempt) of a node's NUMA-zone batch resources in upstream's
    /// `slo_controller_node_resource_reconcile_count` (reason `updateNodeResourceTopology`, as
    /// upstream) and, when it succeeded, in `koord_manager_zone_batch_writes`.
    pub fn zone_write_finished(&self, succeeded: bool) {
        if succeeded {
            self.zone_batch_writes.inc();
        }
        if let Some(family) = self.upstream_reconciles.get(2) {
            let status = if succeeded { "succeeded" } else { "failed" };
            family
                .get_or_create(&StatusLabels {
                    status: status.to_owned(),
                    reason: "updateNodeResourceTopology".to_owned(),
                })
                .inc();
        }
    }

    /// Records the batch allocatable computed for `node` (`None`: removed, recorded as 0 as
    /// upstream does), before the update gate decides whether to write it.
    pub fn batch_computed(&self, node: &str, amounts: Option<(i64, i64)>) {
        self.track(node, std::iter::empty());
        let (cpu_milli, memory_bytes) = amounts.unwrap_or((0, 0));
        for (resource, unit, value) in [
            (names::RESOURCE_BATCH_CPU, "integer", cpu_milli),
            (names::RESOURCE_BATCH_MEMORY, "byte", memory_bytes),
        ] {
            self.extended_resource_allocatable
                .get_or_create(&ExtendedResourceLabels {
                    node: node.to_owned(),
                    resource: resource.to_owned(),
                    unit: unit.to_owned(),
                })
                .set(value as f64);
        }
    }

    /// Records the batch allocatable written on `node` (`None`: removed, recorded as 0).
    pub fn batch_published(&self, node: &str, amounts: Option<(i64, i64)>) {
        self.track(node, std::iter::empty());
        let (cpu_milli, memory_bytes) = amounts.unwrap_or((0, 0));
        let labels = NodeLabels {
            node: node.to_owned(),
        };
        self.batch_cpu_allocatable
            .get_or_create(&labels)
            .set(cpu_milli as f64 / 1000.0);
        self.batch_memory_allocatable
            .get_or_create(&labels)
            .set(memory_bytes as f64);
    }

    /// Records what each NUMA zone's batch entries of `node` say now (after a write, or found
    /// already so): CPU from milli-cores to cores, memory in bytes.
    pub fn zone_batch_published(
        &self,
        node: &str,
        targets: &std::collections::BTreeMap<String, crate::batch::Amounts>,
    ) {
        self.track(node, targets.keys().cloned());
        for (zone, amounts) in targets {
            let labels = ZoneLabels {
                node: node.to_owned(),
                zone: zone.clone(),
            };
            self.zone_batch_cpu_allocatable
                .get_or_create(&labels)
                .set(amounts.cpu as f64 / 1000.0);
            self.zone_batch_memory_allocatable
                .get_or_create(&labels)
                .set(amounts.memory as f64);
        }
    }

    /// Remembers that `node` has per-node series, and zone gauges for `zones`.
    fn track(&self, node: &str, zones: impl Iterator<Item = String>) {
        let mut nodes = self
            .nodes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match nodes.get_mut(node) {
            Some(known) => known.extend(zones),
            None => {
                nodes.insert(node.to_owned(), zones.collect());
            }
        }
    }

    /// The nodes with per-node series that are not in `listed`.
    pub fn nodes_except(&self, listed: &std::collections::HashSet<String>) -> Vec<String> {
        self.nodes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .keys()
            .filter(|node| !listed.contains(*node))
            .cloned()
            .collect()
    }

    /// Removes every per-node series of `node` (the Node was deleted).
    pub fn forget_node(&self, node: &str) {
        let labels = NodeLabels {
            node: node.to_owned(),
        };
        self.batch_cpu_allocatable.remove(&labels);
        self.batch_memory_allocatable.remove(&labels);
        self.cpu_normalization_ratio.remove(&labels);
        self.cpu_normalization_undecided.remove(&labels);
        for (resource, unit) in [
            (names::RESOURCE_BATCH_CPU, "integer"),
            (names::RESOURCE_BATCH_MEMORY, "byte"),
        ] {
            self.extended_resource_allocatable
                .remove(&ExtendedResourceLabels {
                    node: node.to_owned(),
                    resource: resource.to_owned(),
                    unit: unit.to_owned(),
                });
        }
        let zones = self
            .nodes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(node)
            .unwrap_or_default();
        for zone in zones {
            let labels = ZoneLabels {
                node: node.to_owned(),
                zone,
            };
            self.zone_batch_cpu_allocatable.remove(&labels);
            self.zone_batch_memory_allocatable.remove(&labels);
        }
    }

    /// Counts one parse of ConfigMap key `key` into the NodeSLO spec (`nodemetric: false`) or
    /// the NodeMetric spec.
    pub fn spec_parsed(&self, nodemetric: bool, key: &str, succeeded: bool) {
        if let Some(family) = self.upstream_spec_parses.get(usize::from(nodemetric)) {
            family
                .get_or_create(&StatusLabels {
                    status: if succeeded { "succeeded" } else { "failed" }.to_owned(),
                    reason: key.to_owned(),
                })
                .inc();
        }
    }

    /// Counts an apply to `resource` that met a field manager conflict.
    pub fn apply_conflict(&self, resource: &str) {
        self.apply_conflicts
            .get_or_create(&ResourceLabels {
                resource: resource.to_owned(),
            })
            .inc();
    }

    /// Sets the leader gauge of Lease `lease`.
    pub fn set_leader(&self, lease: &str, leader: bool) {
        self.leader
            .get_or_create(&LeaseLabels {
                name: lease.to_owned(),
            })
            .set(i64::from(leader));
    }

    /// Counts a failed reconcile.
    pub fn reconcile_failed(&self, controller: &str, error: &str) {
        let labels = ErrorLabels {
            controller: controller.to_owned(),
            error: error.to_owned(),
        };
        self.reconcile_errors.get_or_create(&labels).inc();
    }
}

/// Records a reconcile's duration on drop.
pub struct ReconcileTimer<'a> {
    metrics: &'a Metrics,
    labels: ControllerLabels,
    start: Instant,
}

impl Drop for ReconcileTimer<'_> {
    fn drop(&mut self) {
        let elapsed = self.start.elapsed().as_secs_f64();
        self.metrics
            .reconcile_duration
            .get_or_create(&self.labels)
            .observe(elapsed);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_forgotten_node_leaves_no_series() {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        for node in ["gone", "kept"] {
            metrics.batch_computed(node, Some((1000, 2000)));
            metrics.batch_published(node, Some((1000, 2000)));
            metrics
                .cpu_normalization_ratio
                .get_or_create(&NodeLabels { node: node.into() })
                .set(1.0);
            metrics
                .cpu_normalization_undecided
                .get_or_create(&NodeLabels { node: node.into() })
                .set(0);
            let targets = std::collections::BTreeMap::from([
                ("node-0".to_owned(), crate::batch::Amounts::new(1000, 1)),
                ("node-1".to_owned(), crate::batch::Amounts::new(1000, 1)),
            ]);
            metrics.zone_batch_published(node, &targets);
        }
        let listed = std::collections::HashSet::from(["kept".to_owned()]);
        assert_eq!(metrics.nodes_except(&listed), ["gone"]);
        metrics.forget_node("gone");
        assert!(metrics.nodes_except(&listed).is_empty());
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(!text.contains(r#""gone""#), "{text}");
        for family in [
            "batch_cpu_allocatable_cores",
            "batch_memory_allocatable_bytes",
            "node_extended_resource_allocatable_internal",
            "cpu_normalization_ratio",
            "cpu_normalization_undecided",
            "zone_batch_cpu_allocatable_cores",
            "zone_batch_memory_allocatable_bytes",
        ] {
            assert!(
                text.lines()
                    .any(|l| l.contains(family) && l.contains(r#"node="kept""#)),
                "{family} of the kept node missing in\n{text}"
            );
        }
    }

    #[test]
    fn spec_parses_count_by_spec_status_and_key() {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        metrics.spec_parsed(false, "resource-threshold-config", true);
        metrics.spec_parsed(false, "resource-threshold-config", false);
        metrics.spec_parsed(true, "colocation-config", true);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            r#"slo_controller_nodeslo_spec_parse_count{status="succeeded",reason="resource-threshold-config"} 1"#,
            r#"slo_controller_nodeslo_spec_parse_count{status="failed",reason="resource-threshold-config"} 1"#,
            r#"slo_controller_nodemetric_spec_parse_count{status="succeeded",reason="colocation-config"} 1"#,
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
        assert!(
            !text.contains(
                r#"slo_controller_nodemetric_spec_parse_count{status="succeeded",reason="resource"#
            )
        );
    }

    #[test]
    fn zone_batch_gauges_are_in_cores_and_bytes_per_zone() {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        let targets = std::collections::BTreeMap::from([
            (
                "node-0".to_owned(),
                crate::batch::Amounts::new(19_000, 23_000_000_000),
            ),
            ("node-1".to_owned(), crate::batch::Amounts::new(2_500, 0)),
        ]);
        metrics.zone_batch_published("n1", &targets);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            r#"koord_manager_zone_batch_cpu_allocatable_cores{node="n1",zone="node-0"} 19.0"#,
            r#"koord_manager_zone_batch_memory_allocatable_bytes{node="n1",zone="node-0"} 23000000000.0"#,
            r#"koord_manager_zone_batch_cpu_allocatable_cores{node="n1",zone="node-1"} 2.5"#,
            r#"koord_manager_zone_batch_memory_allocatable_bytes{node="n1",zone="node-1"} 0.0"#,
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
    }
}
