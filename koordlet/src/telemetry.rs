//! Prometheus metrics of the agent (served on `/metrics` with the `koordlet_` prefix).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::executor::ApplyReport;
use crate::upstream_metrics::UpstreamMetrics;

type Labels = Vec<(String, String)>;

/// The agent's metrics; cheap to clone (shared handles).
#[derive(Debug, Clone)]
pub struct Telemetry {
    /// Duration of one collection round.
    pub collection_seconds: Histogram,
    /// Cgroup writes by strategy and result (`changed`, `unchanged`, `unsupported`, `missing`, `error`).
    pub cgroup_writes: Family<Labels, Counter>,
    /// Cgroup files found unsupported on this kernel (each logged once).
    pub unsupported: Gauge,
    /// NodeMetric status reports by result.
    pub reports: Family<Labels, Counter>,
    /// NodeResourceTopology rounds by result (`created`, `updated`, `unchanged`, `crd_missing`,
    /// `detect_error`, `error`).
    pub topology_reports: Family<Labels, Counter>,
    /// Applies that met fields another field manager had changed (then taken back by a forced
    /// apply), by `resource` (`nodemetrics/status`, `noderesourcetopologies`).
    pub apply_conflicts: Family<Labels, Counter>,
    /// Evictions by strategy and result (`evicted`, `failed`, `dry_run`, `dropped`).
    pub evictions: Family<Labels, Counter>,
    /// 1 for an enabled feature gate, 0 for a disabled one, by `gate` and `implemented`
    /// (`false`: accepted for compatibility, does nothing).
    pub feature_gates: Family<Labels, Gauge>,
    /// CPU set policy requests not applied now (unsatisfiable, ineligible, refused).
    pub cpuset_policy_problems: Gauge,
    /// The series under upstream koordlet's names.
    pub upstream: UpstreamMetrics,
}

impl Telemetry {
    /// Creates and registers the metrics in `registry` (the `koordlet` prefixed one); the
    /// upstream-named series carry the label `node`.
    pub fn register(registry: &mut Registry, node: &str) -> Self {
        let t = Telemetry {
            collection_seconds: Histogram::new(exponential_buckets(0.0005, 2.0, 14)),
            cgroup_writes: Family::default(),
            unsupported: Gauge::default(),
            reports: Family::default(),
            topology_reports: Family::default(),
            apply_conflicts: Family::default(),
            evictions: Family::default(),
            feature_gates: Family::default(),
            cpuset_policy_problems: Gauge::default(),
            upstream: UpstreamMetrics::register(registry, node),
        };
        registry.register(
            "collection_round_seconds",
            "Duration of one metric collection round",
            t.collection_seconds.clone(),
        );
        registry.register(
            "cgroup_writes",
            "Cgroup writes by strategy and result",
            t.cgroup_writes.clone(),
        );
        registry.register(
            "unsupported_resources",
            "Cgroup files this kernel does not support",
            t.unsupported.clone(),
        );
        registry.register(
            "nodemetric_reports",
            "NodeMetric status reports by result",
            t.reports.clone(),
        );
        registry.register(
            "node_topology_reports",
            "NodeResourceTopology cpu-basic-info rounds by result",
            t.topology_reports.clone(),
        );
        registry.register(
            "apply_conflicts",
            "Applies that met fields another field manager had changed; the forced apply took them back",
            t.apply_conflicts.clone(),
        );
        registry.register(
            "evictions",
            "Pod evictions by strategy and result",
            t.evictions.clone(),
        );
        registry.register(
            "feature_gate_enabled",
            "Feature gates in force (1 on, 0 off) and whether koordlet implements them",
            t.feature_gates.clone(),
        );
        registry.register(
            "cpuset_policy_problems",
            "CPU set policy requests not applied now (unsatisfiable, ineligible or refused)",
            t.cpuset_policy_problems.clone(),
        );
        t
    }

    /// Publishes every gate's state.
    pub fn record_feature_gates(&self, gates: &koordlet_core::FeatureGates) {
        for (gate, on) in gates.iter() {
            let implemented = koordlet_core::features::is_implemented(gate);
            self.feature_gates
                .get_or_create(&vec![
                    ("gate".to_string(), gate.to_string()),
                    ("implemented".to_string(), implemented.to_string()),
                ])
                .set(i64::from(on));
        }
    }

    /// Counts an executor report.
    pub fn record_apply(&self, strategy: &str, report: &ApplyReport) {
        let add = |result: &str, n: usize| {
            if n > 0 {
                self.cgroup_writes
                    .get_or_create(&vec![
                        ("strategy".to_string(), strategy.to_string()),
                        ("result".to_string(), result.to_string()),
                    ])
                    .inc_by(n as u64);
            }
        };
        add("changed", report.changes.len());
        add("unchanged", report.skipped_cached + report.skipped_unchanged);
        add("unsupported", report.skipped_unsupported);
        add("missing", report.skipped_missing);
        add("error", report.errors.len());
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn feature_gate_metric_says_which_gates_do_nothing() {
        let mut registry = Registry::with_prefix("koordlet");
        let t = Telemetry::register(&mut registry, "node-1");
        t.record_feature_gates(
            &koordlet_core::FeatureGates::parse("CoreSched=true,Accelerators=true").unwrap(),
        );
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            r#"koordlet_feature_gate_enabled{gate="CoreSched",implemented="true"} 1"#,
            r#"koordlet_feature_gate_enabled{gate="GroupIdentity",implemented="true"} 1"#,
            r#"koordlet_feature_gate_enabled{gate="Accelerators",implemented="false"} 1"#,
            r#"koordlet_feature_gate_enabled{gate="RdtResctrl",implemented="true"} 1"#,
            r#"koordlet_feature_gate_enabled{gate="BECPUEvict",implemented="true"} 0"#,
            r#"koordlet_feature_gate_enabled{gate="Resctrl",implemented="false"} 0"#,
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
    }
}
