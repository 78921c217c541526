//! The offline gatherer: the engine's usage and cgroup input from `plan`'s YAML.
//!
//! The NodeMetric status stands for the current usage: `nodeMetric.nodeUsage` for the node,
//! `podsMetric[]` (matched by namespace and name) for the pods. It also stands for the whole
//! satisfaction window (it is itself an average), so the BE window counts as fully sampled.
//! Without `--cgroup-root`, the cgroup files hold what the kubelet writes: quotas from CPU
//! limits (−1 without), no burst, the besteffort tree unlimited on every CPU.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use koord_api::nodeslo::HostApplicationSpec;
use koord_api::quantity::{ExactQuantity, amount_of};
use koord_api::resources::container_amounts;
use koord_api::{NodeMetric, QoSClass};

use crate::states::PodMeta;
use crate::system::KubeCgroupPaths;
use koordlet_core::strategies::cpu_evict;
use koordlet_core::strategies::cpuset::CpuList;
use koordlet_core::strategies::engine::{
    BeCpuUsage, CgroupFacts, HostAppUsage, NodeFacts, PodUsage, UsageFacts,
};
use koordlet_core::strategies::{FILE_CFS_BURST, FILE_CFS_QUOTA, FILE_CPUSET_CPUS, milli_cpu_to_quota};

fn amount(list: &BTreeMap<String, Quantity>, name: &str) -> Option<i64> {
    let q = ExactQuantity::from_k8s(list.get(name)?).ok()?;
    amount_of(name, q).ok()
}

/// Usage from the NodeMetric status; `window_seconds` is the satisfaction window the status
/// stands for, `collect_interval_seconds` the interval it is sampled at. Host applications are
/// the NodeSLO's `hostApplications` that have an entry in `hostApplicationMetric` (matched by
/// name); whether one counts as BE comes from its NodeSLO entry, as on the live path.
pub fn usage(
    metric: Option<&NodeMetric>,
    pods: &[PodMeta],
    host_applications: &[HostApplicationSpec],
    window_seconds: f64,
    collect_interval_seconds: f64,
) -> UsageFacts {
    let status = metric.and_then(|m| m.status.as_ref());
    let node = status.and_then(|s| s.node_metric.as_ref());
    let mut usage = UsageFacts {
        node_cpu_milli: node
            .and_then(|n| amount(&n.node_usage.resources, "cpu"))
            .map(|c| c as f64),
        node_memory_bytes: node
            .and_then(|n| amount(&n.node_usage.resources, "memory"))
            .and_then(|m| u64::try_from(m).ok()),
        ..UsageFacts::default()
    };
    let app_metrics = status
        .and_then(|s| s.host_application_metric.as_deref())
        .unwrap_or(&[]);
    usage.host_apps = host_applications
        .iter()
        .filter_map(|app| {
            let metric = app_metrics.iter().find(|m| m.name == app.name)?;
            Some(HostAppUsage {
                name: app.name.clone(),
                be: koordlet_core::paths::host_app_is_be(app),
                cpu_milli: amount(&metric.usage.resources, "cpu")? as f64,
            })
        })
        .collect();
    let metrics = status.and_then(|s| s.pods_metric.as_deref()).unwrap_or(&[]);
    let (mut be_usage, mut be_request, mut be_measured) = (0.0, 0i64, false);
    for p in pods {
        let Some(m) = metrics
            .iter()
            .find(|m| m.namespace == p.namespace && m.name == p.name)
        else {
            continue;
        };
        let pod_usage = PodUsage {
            cpu_milli: amount(&m.pod_usage.resources, "cpu").map(|c| c as f64),
            memory_bytes: amount(&m.pod_usage.resources, "memory").and_then(|b| u64::try_from(b).ok()),
        };
        if p.qos == QoSClass::Be && p.is_running() {
            be_measured = true;
            be_usage += pod_usage.cpu_milli.unwrap_or(0.0);
        }
        usage.pods.insert(p.uid.as_str().to_owned(), pod_usage);
    }
    for p in pods.iter().filter(|p| p.qos == QoSClass::Be && p.is_running()) {
        be_request = p
            .pod
            .spec
            .iter()
            .flat_map(|s| s.containers.iter())
            .filter_map(|c| container_amounts(c).ok()?.batch_cpu_request())
            .fold(be_request, i64::saturating_add);
    }
    if be_measured {
        let be = BeCpuUsage {
            usage_milli: be_usage,
            request_milli: be_request as f64,
        };
        let interval = collect_interval_seconds.max(f64::MIN_POSITIVE);
        let samples = (window_seconds / interval).ceil().clamp(1.0, f64::from(u32::MAX)) as u32;
        usage.be_window = Some((be, samples));
        usage.be_latest = Some(be);
    }
    usage
}

/// The satisfaction window of the NodeSLO (for [`usage`]).
pub fn be_window_seconds(slo: Option<&koord_api::NodeSLOSpec>, collect_interval_seconds: f64) -> f64 {
    let default = Default::default();
    let s = slo
        .and_then(|s| s.resource_used_threshold_with_be.as_ref())
        .unwrap_or(&default);
    cpu_evict::window_seconds(s, collect_interval_seconds)
}

/// The cgroup values the kubelet leaves (see the module doc), for the engine's `reads`.
pub fn assumed_cgroups(
    pods: &[PodMeta],
    paths: &KubeCgroupPaths,
    node: &NodeFacts,
    reads: &[(String, &'static str)],
) -> CgroupFacts {
    let cpus = u32::try_from((node.cpu_capacity_milli.max(0) + 999) / 1000)
        .unwrap_or(0)
        .min(4096);
    let all = CpuList::from_cpus(0..cpus);
    // Container and pod quotas from CPU limits, by directory.
    let mut quotas: BTreeMap<String, i64> = BTreeMap::new();
    for p in pods {
        let spec = p.spec_containers();
        let limit_of = |name: &str| {
            spec.iter()
                .find(|c| c.name == name)
                .and_then(|c| container_amounts(c).ok())
                .and_then(|a| a.limits.get("cpu").copied())
                .filter(|l| *l > 0)
        };
        let mut pod_quota = Some(0i64);
        for c in spec {
            pod_quota = match (pod_quota, limit_of(&c.name)) {
                (Some(sum), Some(l)) => Some(sum.saturating_add(milli_cpu_to_quota(l))),
                _ => None,
            };
        }
        quotas.insert(
            p.cgroup_dir(paths).to_string(),
            pod_quota.filter(|q| *q > 0).unwrap_or(-1),
        );
        for c in &p.containers {
            if let Some(dir) = p.container_dir(paths, c) {
                quotas.insert(dir.to_string(), limit_of(&c.name).map_or(-1, milli_cpu_to_quota));
            }
        }
    }
    let mut facts = CgroupFacts::default();
    for (dir, file) in reads {
        match *file {
            FILE_CPUSET_CPUS => {
                facts.cpusets.insert(dir.clone(), all.clone());
            }
            FILE_CFS_QUOTA => {
                facts
                    .ints
                    .insert((dir.clone(), *file), quotas.get(dir).copied().unwrap_or(-1));
            }
            FILE_CFS_BURST => {
                facts.ints.insert((dir.clone(), *file), 0);
            }
            _ => {}
        }
    }
    facts
}
