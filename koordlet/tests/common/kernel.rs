//! What the real-kernel QoS tests share on cgroup v1 and v2: the busy BE pod, the burst round
//! on a throttled LS pod, and the cfsQuota/cpuset suppress plans.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use koord_api::QoSClass;
use koord_api::nodeslo::{CpuBurstPolicy, ResourceThresholdStrategy};
use koordlet::states::PodMeta;
use koordlet::system::CgroupDir;
use koordlet_core::strategies::cpu_burst::{
    self, BurstContainer, BurstInput, BurstParams, BurstPlan, BurstPod, BurstState, SharePool,
};
use koordlet_core::strategies::cpu_suppress::{
    self, BeCgroups, CpuPools, CpuUsage, SuppressInput, SuppressPlan,
};

/// A running BE pod `test/burner` with one container `c` requesting 500 batch milli-cores and
/// limited to `batch_cpu_limit` (`"0"`: no limit).
pub fn be_pod(uid: &str, container_id: &str, batch_cpu_limit: &str) -> PodMeta {
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "burner", "namespace": "test", "uid": uid, "labels": {"koordinator.sh/qosClass": "BE"}},
        "spec": {"containers": [{"name": "c", "resources": {
            "requests": {"kubernetes.io/batch-cpu": "500"}, "limits": {"kubernetes.io/batch-cpu": batch_cpu_limit}}}]},
        "status": {"qosClass": "BestEffort", "phase": "Running",
                   "containerStatuses": [{"name": "c", "containerID": container_id, "image": "", "imageID": "", "ready": true, "restartCount": 0}]}
    }))
    .unwrap();
    PodMeta::new(Arc::new(pod)).unwrap()
}

/// A cgroup as cpu_burst reads it: where it is and its current quota and burst.
pub struct BurstCgroup {
    /// Relative to the controller root.
    pub dir: CgroupDir,
    /// `cpu.cfs_quota_us` (v2: the quota of `cpu.max`).
    pub quota_us: Option<i64>,
    /// `cpu.cfs_burst_us` (v2: `cpu.max.burst`).
    pub burst_us: Option<i64>,
}

/// LS pod `ns/p` with container `c1` limited to `limit_milli`, throttled half of the periods
/// while using its whole limit, under policy auto with `cpu_burst_percent`.
pub fn throttled_ls_pod(
    pod: BurstCgroup,
    container: BurstCgroup,
    limit_milli: i64,
    cpu_burst_percent: i64,
) -> BurstPod {
    BurstPod {
        namespace: "ns".into(),
        name: "p".into(),
        qos: QoSClass::Ls,
        active: true,
        cgroup: pod.dir,
        cfs_quota_us: pod.quota_us,
        cfs_burst_us: pod.burst_us,
        config: BurstParams {
            policy: CpuBurstPolicy::Auto,
            cpu_burst_percent,
            cfs_quota_burst_percent: 300,
            cfs_quota_burst_period_seconds: -1,
        },
        config_source: "node".into(),
        containers: vec![BurstContainer {
            id: "c1".into(),
            name: "main".into(),
            cgroup: container.dir,
            cpu_limit_milli: Some(limit_milli),
            cfs_quota_us: container.quota_us,
            cfs_burst_us: container.burst_us,
            throttled_ratio: Some(0.5),
            usage_milli: Some(limit_milli as f64),
        }],
    }
}

/// One burst round on a two-processor share pool used `node_usage_milli` (0: idle, scale up;
/// huge: overloaded, scale down), threshold 50 %.
pub fn burst_round(pod: BurstPod, node_usage_milli: f64, round: usize, state: &BurstState) -> BurstPlan {
    cpu_burst::decide(&BurstInput {
        share_pool_threshold_percent: 50,
        share_pool: SharePool {
            processors: 2,
            lse_lsr_request_milli: 0,
            node_usage_milli: Some(node_usage_milli),
            lse_lsr_be_usage_milli: Some(0.0),
        },
        pods: &[pod],
        now_seconds: round as f64,
        state,
    })
}

/// The suppress plan for a node of `capacity_milli` with nothing reserved, no host
/// applications, and (when `ls_usage_milli` > 0) one LS pod using that much, which is then the
/// node's whole usage.
pub fn suppress(
    strategy: &ResourceThresholdStrategy,
    capacity_milli: i64,
    ls_usage_milli: i64,
    cgroups: &BeCgroups,
    cpus: &CpuPools,
) -> SuppressPlan {
    let pods: Vec<CpuUsage> = (ls_usage_milli > 0)
        .then_some(CpuUsage {
            be: false,
            usage_milli: ls_usage_milli,
        })
        .into_iter()
        .collect();
    cpu_suppress::decide(&SuppressInput {
        strategy,
        capacity_milli,
        reserved_milli: 0,
        node_usage_milli: ls_usage_milli,
        pods: &pods,
        host_apps: &[],
        cgroups,
        cpus,
    })
}
