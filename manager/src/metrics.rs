//! Prometheus metrics of the manager (prefix `koord_manager_`).

use std::time::Instant;

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

/// Labels of a node's batch resource.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BatchLabels {
    /// Node name.
    pub node: String,
    /// `cpu` (milli-cores) or `memory` (bytes).
    pub resource: String,
}

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
    /// Published batch allocatable (after third-party allocations), per node and resource.
    pub batch_allocatable: Family<BatchLabels, Gauge>,
    /// 1 while a ConfigMap key is broken (its last good value stays in force).
    pub config_key_invalid: Family<KeyLabels, Gauge>,
    /// Node status writes of batch resources.
    pub batch_writes: Counter,
    /// Pods held in the noderesource pod index (shows when the initial list is in).
    pub pods_indexed: Gauge,
}

fn duration_histogram() -> Histogram {
    Histogram::new([
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    ])
}

impl Metrics {
    /// Creates the metrics and registers them in `registry`.
    pub fn register(registry: &mut Registry) -> Metrics {
        let metrics = Metrics {
            reconciles: Family::default(),
            reconcile_errors: Family::default(),
            reconcile_duration: Family::new_with_constructor(duration_histogram as fn() -> Histogram),
            batch_allocatable: Family::default(),
            config_key_invalid: Family::default(),
            batch_writes: Counter::default(),
            pods_indexed: Gauge::default(),
        };
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
            "batch_allocatable",
            "Batch allocatable published on the node (cpu in milli-cores, memory in bytes)",
            metrics.batch_allocatable.clone(),
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
            "pods_indexed",
            "Pods held in the noderesource pod index",
            metrics.pods_indexed.clone(),
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
