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
    /// Time of each cgroup file write the kernel was asked for, in milliseconds, by `type` (the
    /// resource's v1 file name) and `status` (`success`, `failed`), as upstream names it.
    pub resource_update_ms: Family<Labels, Histogram>,
    /// The series under upstream koordlet's names.
    pub upstream: UpstreamMetrics,
}

/// Upstream's buckets of `resource_update_duration_milliseconds`: 10 µs to about 164 ms, ×4.
fn resource_update_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.01, 4.0, 8))
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
            resource_update_ms: Family::new_with_constructor(resource_update_histogram),
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
        registry.register(
            "resource_update_duration_milliseconds",
            "Time of each cgroup file write, milliseconds, by type (file) and status",
            t.resource_update_ms.clone(),
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
        for timing in &report.timings {
            let status = if timing.ok { "success" } else { "failed" };
            self.resource_update_ms
                .get_or_create(&vec![
                    ("type".to_string(), timing.resource.name().to_string()),
                    ("status".to_string(), status.to_string()),
                ])
                .observe(timing.elapsed.as_secs_f64() * 1000.0);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn each_kernel_write_is_observed_by_file_and_status() {
        use crate::executor::{ApplyReport, WriteTiming};
        use crate::system::CgroupResource;
        let mut registry = Registry::with_prefix("koordlet");
        let t = Telemetry::register(&mut registry, "node-1");
        let timing = |resource, ok, micros| WriteTiming {
            resource,
            ok,
            elapsed: std::time::Duration::from_micros(micros),
        };
        let report = ApplyReport {
            timings: vec![
                timing(CgroupResource::CpuCfsQuota, true, 30),
                timing(CgroupResource::CpuCfsQuota, true, 500),
                timing(CgroupResource::CpuShares, false, 5),
            ],
            ..ApplyReport::default()
        };
        t.record_apply("be_limits", &report);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            // 30 µs is above the first bucket (10 µs) and within the second (40 µs).
            r#"koordlet_resource_update_duration_milliseconds_bucket{le="0.01",type="cpu.cfs_quota_us",status="success"} 0"#,
            r#"koordlet_resource_update_duration_milliseconds_bucket{le="0.04",type="cpu.cfs_quota_us",status="success"} 1"#,
            r#"koordlet_resource_update_duration_milliseconds_bucket{le="0.64",type="cpu.cfs_quota_us",status="success"} 2"#,
            r#"koordlet_resource_update_duration_milliseconds_count{type="cpu.cfs_quota_us",status="success"} 2"#,
            r#"koordlet_resource_update_duration_milliseconds_count{type="cpu.shares",status="failed"} 1"#,
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
    }

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
