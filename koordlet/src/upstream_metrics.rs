//! The series of upstream koordlet that users chart and alert on, under upstream's names and
//! labels (every one carries `node`), filled from what this agent really measures or decides:
//!
//! | series | from |
//! |---|---|
//! | `koordlet_start_time{node}` | the agent's start, unix seconds |
//! | `koordlet_node_used_cpu_cores{node}` | the collection round's node CPU usage (`/proc/stat`) |
//! | `koordlet_node_used_memory_bytes{node}` | the collection round's node memory usage without page cache (`/proc/meminfo`) |
//! | `koordlet_node_resource_allocatable{node,resource,unit}` | the Node's batch allocatable as koordlet sees it |
//! | `koordlet_be_suppress_cpu_cores{node,type}` | what the fast suppress loop allows BE pods (the besteffort quota in force, or the CPUs of its cpuset), `type` its policy |
//! | `koordlet_be_suppress_ls_used_cpu_cores{node}` | non-BE usage (pods and host applications) of its last tick |
//! | `koordlet_be_suppress_be_used_cpu_cores{node}` | BE usage of its last tick |
//! | `koordlet_pod_eviction{node,reason}` | evictions carried out, by the strategy's reason |
//! | `koordlet_node_predicted_resource_reclaimable{node,predictor,resource,unit}` | the peak predictor's prod-reclaimable result per predictor (`podReclaimablePredictor`, `priorityReclaimablePredictor`, `minPredictor`); cpu in `core`, memory in `byte`; absent while no prediction is made |
//! | `koordlet_container_scaled_cfs_burst_us{node,pod_namespace,pod_name,container_id,container_name}` | the `cpu.cfs_burst_us` the last QoS round decided for a container of a pod whose burst policy sets the kernel burst (`cpuBurstOnly`, `auto`) |
//! | `koordlet_container_scaled_cfs_quota_us{...same}` | the `cpu.cfs_quota_us` the last QoS round decided for a container with a CPU limit of a pod whose policy scales the quota (`cfsQuotaBurstOnly`, `auto`) |

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::core::v1::Node;
use koord_api::names;
use koord_runtime::UnsuffixedCounter;
use koordlet_core::strategies::cpu_burst::PodBurst;
use koordlet_core::strategies::fast_suppress::FastUsage;
use koordlet_core::strategies::settle::SuppressMode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// A gauge of base units (cores, bytes, seconds).
type FloatGauge = Gauge<f64, AtomicU64>;

/// `resource` and `unit` of `koordlet_node_resource_allocatable` (upstream's units: `integer`
/// for batch-cpu, a count of milli-cores; `byte` for batch-memory).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabels {
    /// The extended resource name, e.g. `kubernetes.io/batch-cpu`.
    pub resource: String,
    /// `integer` or `byte`.
    pub unit: String,
}

/// `type` of `koordlet_be_suppress_cpu_cores`: the suppress policy in force.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SuppressLabels {
    /// `cfsQuota` or `cpuset`.
    pub r#type: String,
}

/// `reason` of `koordlet_pod_eviction`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// The strategy's reason, e.g. `EvictPodByNodeMemoryUsage`.
    pub reason: String,
}

/// `predictor`, `resource` and `unit` of `koordlet_node_predicted_resource_reclaimable`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PredictorLabels {
    /// `podReclaimablePredictor`, `priorityReclaimablePredictor` or `minPredictor`.
    pub predictor: String,
    /// `cpu` or `memory`.
    pub resource: String,
    /// `core` or `byte`.
    pub unit: String,
}

/// The container of `koordlet_container_scaled_cfs_*` (upstream's label names).
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct ContainerLabels {
    /// The pod's namespace.
    pub pod_namespace: String,
    /// The pod's name.
    pub pod_name: String,
    /// The container's ID as the pod status carries it (`containerd://...`).
    pub container_id: String,
    /// The container's name.
    pub container_name: String,
}

/// The containers that have a series of each scaled-CFS family, so that a container the last
/// round did not decide for loses its series (upstream keeps the series of deleted pods).
#[derive(Debug, Default)]
struct ScaledKeys {
    burst: BTreeSet<ContainerLabels>,
    quota: BTreeSet<ContainerLabels>,
}

/// Upstream-named series; cheap to clone (shared handles).
#[derive(Debug, Clone, Default)]
pub struct UpstreamMetrics {
    start_time: FloatGauge,
    node_used_cpu: FloatGauge,
    node_used_memory: FloatGauge,
    allocatable: Family<ResourceLabels, FloatGauge>,
    suppress_cpu: Family<SuppressLabels, FloatGauge>,
    suppress_ls_used: FloatGauge,
    suppress_be_used: FloatGauge,
    evictions: Family<ReasonLabels, UnsuffixedCounter>,
    predicted_reclaimable: Family<PredictorLabels, FloatGauge>,
    scaled_burst: Family<ContainerLabels, FloatGauge>,
    scaled_quota: Family<ContainerLabels, FloatGauge>,
    scaled_keys: Arc<Mutex<ScaledKeys>>,
}

impl UpstreamMetrics {
    /// Creates the series and registers them in `registry` (the `koordlet` prefixed one) with
    /// the label `node`.
    pub fn register(registry: &mut Registry, node: &str) -> Self {
        let m = UpstreamMetrics::default();
        let r = registry.sub_registry_with_label((Cow::Borrowed("node"), Cow::Owned(node.to_owned())));
        r.register(
            "start_time",
            "The start time of koordlet, unix seconds",
            m.start_time.clone(),
        );
        r.register(
            "node_used_cpu_cores",
            "CPU cores used by the node (last collection round)",
            m.node_used_cpu.clone(),
        );
        r.register(
            "node_used_memory_bytes",
            "Memory used by the node without page cache (last collection round)",
            m.node_used_memory.clone(),
        );
        r.register(
            "node_resource_allocatable",
            "Batch allocatable of the node (batch-cpu: unit integer, milli-cores; batch-memory: bytes)",
            m.allocatable.clone(),
        );
        r.register(
            "be_suppress_cpu_cores",
            "BE CPU budget of the suppress loop in cores, by policy (absent while suppress is off)",
            m.suppress_cpu.clone(),
        );
        r.register(
            "be_suppress_ls_used_cpu_cores",
            "CPU cores used by non-BE pods and host applications (last suppress tick)",
            m.suppress_ls_used.clone(),
        );
        r.register(
            "be_suppress_be_used_cpu_cores",
            "CPU cores used by BE pods (last suppress tick)",
            m.suppress_be_used.clone(),
        );
        r.register(
            "pod_eviction",
            "Pods evicted by koordlet, by reason",
            m.evictions.clone(),
        );
        r.register(
            "node_predicted_resource_reclaimable",
            "Prod-reclaimable resources predicted by the peak predictor, by predictor (cpu in cores, memory in bytes)",
            m.predicted_reclaimable.clone(),
        );
        r.register(
            "container_scaled_cfs_burst_us",
            "cpu.cfs_burst_us the last QoS round decided for the container (burst policies cpuBurstOnly, auto), microseconds",
            m.scaled_burst.clone(),
        );
        r.register(
            "container_scaled_cfs_quota_us",
            "cpu.cfs_quota_us the last QoS round decided for the container (burst policies cfsQuotaBurstOnly, auto), microseconds",
            m.scaled_quota.clone(),
        );
        m
    }

    /// Records the burst and quota a QoS round decided for each container of the pods of
    /// `pods` whose policy sets them; containers not among them lose their series.
    pub fn record_cpu_burst(&self, pods: &[PodBurst]) {
        let mut burst = BTreeSet::new();
        let mut quota = BTreeSet::new();
        for pod in pods {
            for c in &pod.containers {
                let labels = ContainerLabels {
                    pod_namespace: pod.namespace.clone(),
                    pod_name: pod.name.clone(),
                    container_id: c.id.clone(),
                    container_name: c.name.clone(),
                };
                if pod.config.quota_burst()
                    && let Some(q) = c.quota_us.filter(|q| *q > 0)
                {
                    self.scaled_quota.get_or_create(&labels).set(q as f64);
                    quota.insert(labels.clone());
                }
                if pod.config.kernel_burst() {
                    self.scaled_burst.get_or_create(&labels).set(c.burst_us as f64);
                    burst.insert(labels);
                }
            }
        }
        let mut keys = self.scaled_keys.lock().unwrap_or_else(PoisonError::into_inner);
        for gone in keys.burst.difference(&burst) {
            self.scaled_burst.remove(gone);
        }
        for gone in keys.quota.difference(&quota) {
            self.scaled_quota.remove(gone);
        }
        *keys = ScaledKeys { burst, quota };
    }

    /// The scaled burst (`quota: false`) or quota series of a container now.
    pub fn scaled_cfs(&self, labels: &ContainerLabels, quota: bool) -> Option<f64> {
        let family = if quota {
            &self.scaled_quota
        } else {
            &self.scaled_burst
        };
        family.get(labels).map(|g| g.get())
    }

    /// Records a prediction: each predictor's result, CPU in whole milli-cores as cores,
    /// memory in whole bytes (as the NodeMetric carries them).
    pub fn record_predicted_reclaimable(&self, prediction: &koordlet_core::prediction::ProdReclaimable) {
        for (predictor, amounts) in [
            ("podReclaimablePredictor", prediction.pod.result),
            ("priorityReclaimablePredictor", prediction.priority.result),
            ("minPredictor", prediction.result),
        ] {
            for (resource, unit, value) in [
                (
                    "cpu",
                    "core",
                    (amounts.cpu_cores.max(0.0) * 1000.0).floor() / 1000.0,
                ),
                ("memory", "byte", amounts.memory_bytes.max(0.0).floor()),
            ] {
                self.predicted_reclaimable
                    .get_or_create(&PredictorLabels {
                        predictor: predictor.to_owned(),
                        resource: resource.to_owned(),
                        unit: unit.to_owned(),
                    })
                    .set(value);
            }
        }
    }

    /// Removes the prediction series (no prediction this round: stale numbers would mislead).
    pub fn clear_predicted_reclaimable(&self) {
        self.predicted_reclaimable.clear();
    }

    /// The predicted reclaimable value of one series now.
    pub fn predicted_reclaimable(&self, predictor: &str, resource: &str) -> Option<f64> {
        let unit = if resource == "cpu" { "core" } else { "byte" };
        self.predicted_reclaimable
            .get(&PredictorLabels {
                predictor: predictor.to_owned(),
                resource: resource.to_owned(),
                unit: unit.to_owned(),
            })
            .map(|g| g.get())
    }

    /// Records the start time, `unix_seconds`.
    pub fn record_start(&self, unix_seconds: f64) {
        self.start_time.set(unix_seconds);
    }

    /// Records the node usage of a collection round (each only when it was read).
    pub fn record_node_usage(&self, cpu_cores: Option<f64>, memory_bytes: Option<f64>) {
        if let Some(cores) = cpu_cores {
            self.node_used_cpu.set(cores);
        }
        if let Some(bytes) = memory_bytes {
            self.node_used_memory.set(bytes);
        }
    }

    /// Records the Node's batch allocatable; a resource the Node does not offer is 0, as
    /// upstream (the manager removed it, or colocation is off).
    pub fn record_allocatable(&self, node: &Node) {
        let allocatable = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
        let amount = |name: &str| {
            allocatable
                .and_then(|a| a.get(name))
                .and_then(|q| koord_api::quantity::ExactQuantity::from_k8s(q).ok())
                .and_then(|q| koord_api::quantity::amount_of(name, q).ok())
                .unwrap_or(0)
        };
        for (resource, unit) in [
            (names::RESOURCE_BATCH_CPU, "integer"),
            (names::RESOURCE_BATCH_MEMORY, "byte"),
        ] {
            self.allocatable
                .get_or_create(&ResourceLabels {
                    resource: resource.to_owned(),
                    unit: unit.to_owned(),
                })
                .set(amount(resource) as f64);
        }
    }

    /// Records one suppress tick: what BE pods are allowed under `mode`, in milli-cores
    /// (`None`: unlimited or unknown, the series goes away) and the usage it was decided from.
    pub fn record_suppress(&self, mode: SuppressMode, allowed_milli: Option<i64>, usage: &FastUsage) {
        let policy = match mode {
            SuppressMode::Quota => Some("cfsQuota"),
            SuppressMode::Cpuset => Some("cpuset"),
            SuppressMode::Off => None,
        };
        match (policy, allowed_milli) {
            (Some(policy), Some(milli)) => {
                let labels = SuppressLabels {
                    r#type: policy.to_owned(),
                };
                // One policy at a time: a policy change drops the other's series.
                if self.suppress_cpu.get(&labels).is_none() {
                    self.suppress_cpu.clear();
                }
                self.suppress_cpu
                    .get_or_create(&labels)
                    .set(milli as f64 / 1000.0);
            }
            _ => self.suppress_cpu.clear(),
        }
        self.suppress_ls_used.set(usage.non_be_last_milli as f64 / 1000.0);
        self.suppress_be_used.set(usage.be_milli as f64 / 1000.0);
    }

    /// Creates `reason`'s eviction series at 0.
    pub fn init_eviction(&self, reason: &str) {
        drop(self.evictions.get_or_create(&ReasonLabels {
            reason: reason.to_owned(),
        }));
    }

    /// Counts a pod evicted (or, after a refused eviction, deleted or killed) for `reason`.
    pub fn record_eviction(&self, reason: &str) {
        self.evictions
            .get_or_create(&ReasonLabels {
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// The BE budget in cores under `policy` now (`None`: no series).
    pub fn suppress_cores(&self, policy: &'static str) -> Option<f64> {
        self.suppress_cpu
            .get(&SuppressLabels {
                r#type: policy.to_owned(),
            })
            .map(|g| g.get())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn text(registry: &Registry) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
        text
    }

    #[test]
    fn series_carry_upstream_names_node_label_and_base_units() {
        let mut registry = Registry::with_prefix("koordlet");
        let m = UpstreamMetrics::register(&mut registry, "node-1");
        m.record_start(1_700_000_000.0);
        m.record_node_usage(Some(1.5), Some(2.0 * 1024.0 * 1024.0 * 1024.0));
        let node = Node {
            status: Some(k8s_openapi::api::core::v1::NodeStatus {
                allocatable: Some(
                    [
                        (names::RESOURCE_BATCH_CPU.to_owned(), Quantity("25000".into())),
                        (names::RESOURCE_BATCH_MEMORY.to_owned(), Quantity("4Gi".into())),
                    ]
                    .into(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        };
        m.record_allocatable(&node);
        let usage = FastUsage {
            be_milli: 500,
            non_be_last_milli: 1200,
            ..Default::default()
        };
        m.record_suppress(SuppressMode::Quota, Some(2600), &usage);
        m.record_eviction("EvictPodByNodeMemoryUsage");
        let text = text(&registry);
        for line in [
            r#"koordlet_start_time{node="node-1"} 1700000000.0"#,
            r#"koordlet_node_used_cpu_cores{node="node-1"} 1.5"#,
            r#"koordlet_node_used_memory_bytes{node="node-1"} 2147483648.0"#,
            r#"koordlet_node_resource_allocatable{node="node-1",resource="kubernetes.io/batch-cpu",unit="integer"} 25000.0"#,
            r#"koordlet_node_resource_allocatable{node="node-1",resource="kubernetes.io/batch-memory",unit="byte"} 4294967296.0"#,
            r#"koordlet_be_suppress_cpu_cores{node="node-1",type="cfsQuota"} 2.6"#,
            r#"koordlet_be_suppress_ls_used_cpu_cores{node="node-1"} 1.2"#,
            r#"koordlet_be_suppress_be_used_cpu_cores{node="node-1"} 0.5"#,
            r#"koordlet_pod_eviction{node="node-1",reason="EvictPodByNodeMemoryUsage"} 1"#,
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
    }

    #[test]
    fn suppress_series_follows_the_policy_and_goes_away_when_off() {
        let mut registry = Registry::default();
        let m = UpstreamMetrics::register(&mut registry, "n");
        let usage = FastUsage::default();
        m.record_suppress(SuppressMode::Quota, Some(1000), &usage);
        assert_eq!(m.suppress_cores("cfsQuota"), Some(1.0));
        m.record_suppress(SuppressMode::Cpuset, Some(3000), &usage);
        assert_eq!(m.suppress_cores("cfsQuota"), None);
        assert_eq!(m.suppress_cores("cpuset"), Some(3.0));
        m.record_suppress(SuppressMode::Off, None, &usage);
        assert_eq!(m.suppress_cores("cpuset"), None);
        assert!(!text(&registry).contains("be_suppress_cpu_cores{"));
    }

    #[test]
    fn predicted_reclaimable_per_predictor_and_cleared_when_unavailable() {
        use koordlet_core::prediction::{Amounts, ProdReclaimable};
        let mut registry = Registry::with_prefix("koordlet");
        let m = UpstreamMetrics::register(&mut registry, "n");
        let mut prediction = ProdReclaimable {
            pod: Default::default(),
            priority: Default::default(),
            result: Amounts::new(1.2345, 1024.7),
        };
        prediction.pod.result = Amounts::new(2.0, 4096.0);
        prediction.priority.result = Amounts::new(1.2345, 1024.7);
        m.record_predicted_reclaimable(&prediction);
        let text = text(&registry);
        for line in [
            r#"koordlet_node_predicted_resource_reclaimable{node="n",predictor="minPredictor",resource="cpu",unit="core"} 1.234"#,
            r#"koordlet_node_predicted_resource_reclaimable{node="n",predictor="minPredictor",resource="memory",unit="byte"} 1024.0"#,
            r#"koordlet_node_predicted_resource_reclaimable{node="n",predictor="podReclaimablePredictor",resource="cpu",unit="core"} 2.0"#,
            r#"koordlet_node_predicted_resource_reclaimable{node="n",predictor="priorityReclaimablePredictor",resource="memory",unit="byte"} 1024.0"#,
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
        assert_eq!(
            m.predicted_reclaimable("podReclaimablePredictor", "memory"),
            Some(4096.0)
        );
        m.clear_predicted_reclaimable();
        assert_eq!(m.predicted_reclaimable("minPredictor", "cpu"), None);
    }

    #[test]
    fn scaled_cfs_series_follow_the_policy_and_leave_with_the_container() {
        use koord_api::nodeslo::CpuBurstPolicy;
        use koordlet_core::strategies::cpu_burst::{BurstParams, ContainerBurst, QuotaOp};
        let mut registry = Registry::with_prefix("koordlet");
        let m = UpstreamMetrics::register(&mut registry, "n");
        let pod = |name: &str, policy: CpuBurstPolicy| PodBurst {
            namespace: "default".into(),
            name: name.into(),
            source: "node".into(),
            config: BurstParams {
                policy,
                cpu_burst_percent: 1000,
                cfs_quota_burst_percent: 300,
                cfs_quota_burst_period_seconds: -1,
            },
            pod_burst_us: 200_000,
            containers: vec![ContainerBurst {
                id: format!("containerd://{name}"),
                name: "main".into(),
                burst_us: 100_000,
                quota_op: Some(QuotaOp::ScaleUp),
                quota_us: Some(120_000),
            }],
        };
        let labels = |name: &str| ContainerLabels {
            pod_namespace: "default".into(),
            pod_name: name.into(),
            container_id: format!("containerd://{name}"),
            container_name: "main".into(),
        };
        m.record_cpu_burst(&[
            pod("auto", CpuBurstPolicy::Auto),
            pod("kernel", CpuBurstPolicy::CpuBurstOnly),
            pod("quota", CpuBurstPolicy::CfsQuotaBurstOnly),
            pod("none", CpuBurstPolicy::None),
        ]);
        let scraped = text(&registry);
        for line in [
            r#"koordlet_container_scaled_cfs_burst_us{node="n",pod_namespace="default",pod_name="auto",container_id="containerd://auto",container_name="main"} 100000.0"#,
            r#"koordlet_container_scaled_cfs_quota_us{node="n",pod_namespace="default",pod_name="auto",container_id="containerd://auto",container_name="main"} 120000.0"#,
        ] {
            assert!(scraped.contains(line), "missing {line} in\n{scraped}");
        }
        assert_eq!(m.scaled_cfs(&labels("kernel"), false), Some(100_000.0));
        assert_eq!(m.scaled_cfs(&labels("kernel"), true), None);
        assert_eq!(m.scaled_cfs(&labels("quota"), false), None);
        assert_eq!(m.scaled_cfs(&labels("quota"), true), Some(120_000.0));
        assert_eq!(m.scaled_cfs(&labels("none"), false), None);
        assert_eq!(m.scaled_cfs(&labels("none"), true), None);
        // The next round no longer sees `kernel` (deleted) and `auto` lost its quota.
        let mut auto = pod("auto", CpuBurstPolicy::Auto);
        auto.containers[0].quota_us = None;
        m.record_cpu_burst(&[auto, pod("quota", CpuBurstPolicy::CfsQuotaBurstOnly)]);
        assert_eq!(m.scaled_cfs(&labels("kernel"), false), None);
        assert_eq!(m.scaled_cfs(&labels("auto"), false), Some(100_000.0));
        assert_eq!(m.scaled_cfs(&labels("auto"), true), None);
        assert_eq!(m.scaled_cfs(&labels("quota"), true), Some(120_000.0));
        m.record_cpu_burst(&[]);
        assert!(!text(&registry).contains("scaled_cfs"));
    }

    #[test]
    fn a_node_without_batch_resources_reports_zero() {
        let mut registry = Registry::default();
        let m = UpstreamMetrics::register(&mut registry, "n");
        m.record_allocatable(&Node::default());
        assert!(
            text(&registry).contains(
                r#"node_resource_allocatable{node="n",resource="kubernetes.io/batch-cpu",unit="integer"} 0.0"#
            ),
            "{}",
            text(&registry)
        );
    }
}
