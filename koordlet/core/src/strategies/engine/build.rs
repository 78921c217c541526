//! Turns the engine's gathered input into each strategy's own input (pure).

use k8s_openapi::api::core::v1::Node;
use koord_api::KubeQoSClass;
use koord_api::nodeslo::CpuBurstStrategy;
use koord_api::resources::container_amounts;
use koord_api::{QoSClass, names};

use super::EngineInput;
use crate::pod::PodMeta;
use crate::strategies::cpu_burst::{BurstContainer, BurstParams, BurstPod, SharePool};
use crate::strategies::cpu_suppress::{BeCgroups, BePodCgroups, CgroupState, CpuPools, CpuUsage};
use crate::strategies::cpuset::{CpuInfo, CpuList};
use crate::strategies::cpuset_policy::KubeletCpuManager;
use crate::strategies::eviction::{ANNOTATION_EVICTION_POLICY, EvictCandidate, EvictionPolicy, ExemptPod};
use crate::strategies::memory_evict;
use crate::strategies::{FILE_CFS_BURST, FILE_CFS_QUOTA, FILE_CPUSET_CPUS};
use crate::{CgroupDir, KubeCgroupPaths};

/// The node's CPU and memory as the strategies need them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeFacts {
    /// `status.capacity.cpu`, milli-cores.
    pub cpu_capacity_milli: i64,
    /// `status.allocatable.cpu`, milli-cores (capacity when unset).
    pub cpu_allocatable_milli: i64,
    /// Memory capacity, bytes (what memory eviction divides by).
    pub memory_capacity_bytes: u64,
    /// Allocatable `kubernetes.io/batch-cpu`, milli (policy `evictByAllocatable`).
    pub batch_cpu_allocatable_milli: Option<i64>,
    /// CPU of the `node.koordinator.sh/reservation` annotation, milli.
    pub annotation_reserved_milli: i64,
    /// `reservedCPUs` of that annotation: BE never gets them.
    pub reserved_cpus: CpuList,
    /// The kubelet's CPU manager policy (from its `cpu_manager_state`; the agent fills it in):
    /// under `static` koordlet leaves cpusets to the kubelet.
    pub kubelet_cpu_manager: KubeletCpuManager,
    /// Allocatable memory, bytes (capacity when unset): memory QoS's limit of an unlimited
    /// container.
    pub memory_allocatable_bytes: u64,
    /// Whether the kernel has the memory QoS files (probed by the caller; absent by default).
    pub memory_qos_kernel: crate::strategies::memory_qos::MemoryQosKernel,
    /// `node.koordinator.sh/cpu-normalization-ratio` (1 when absent or unreadable): BE quotas
    /// are divided by it.
    pub cpu_normalization: koord_api::cpu_normalization::NormalizationRatio,
}

impl NodeFacts {
    /// Reads a Node object; unparsable quantities count as absent.
    pub fn from_node(node: &Node) -> NodeFacts {
        let status = node.status.as_ref();
        let amount = |list: Option<
            &std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
        >,
                      name: &str| {
            list.and_then(|l| l.get(name))
                .and_then(|q| koord_api::quantity::ExactQuantity::from_k8s(q).ok())
                .and_then(|q| koord_api::quantity::amount_of(name, q).ok())
        };
        let capacity = status.and_then(|s| s.capacity.as_ref());
        let allocatable = status.and_then(|s| s.allocatable.as_ref());
        let cpu_capacity_milli = amount(capacity, "cpu").unwrap_or(0).max(0);
        let (annotation_reserved_milli, reserved_cpus) = node
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(names::ANNOTATION_NODE_RESERVATION))
            .and_then(|text| serde_json::from_str::<serde_json::Value>(text).ok())
            .map(|v| {
                let cpu = v
                    .pointer("/resources/cpu")
                    .and_then(|c| c.as_str())
                    .and_then(|c| koord_api::quantity::ExactQuantity::parse(c).ok())
                    .and_then(|q| q.milli_value().ok())
                    .unwrap_or(0);
                let cpus = v
                    .get("reservedCPUs")
                    .and_then(|c| c.as_str())
                    .and_then(|c| CpuList::parse(c).ok())
                    .unwrap_or_default();
                (cpu, cpus)
            })
            .unwrap_or_default();
        let memory_capacity_bytes = amount(capacity, "memory")
            .and_then(|m| u64::try_from(m).ok())
            .unwrap_or(0);
        NodeFacts {
            cpu_capacity_milli,
            cpu_allocatable_milli: amount(allocatable, "cpu").unwrap_or(cpu_capacity_milli),
            memory_capacity_bytes,
            memory_allocatable_bytes: amount(allocatable, "memory")
                .and_then(|m| u64::try_from(m).ok())
                .unwrap_or(memory_capacity_bytes),
            memory_qos_kernel: Default::default(),
            batch_cpu_allocatable_milli: amount(allocatable, names::RESOURCE_BATCH_CPU)
                .or_else(|| amount(allocatable, names::DEPRECATED_RESOURCE_BATCH_CPU)),
            annotation_reserved_milli,
            reserved_cpus,
            kubelet_cpu_manager: KubeletCpuManager::None,
            cpu_normalization: cpu_normalization_of(node),
        }
    }

    /// `max(capacity − allocatable, annotation)`: what suppress keeps for the system.
    pub fn reserved_milli(&self) -> i64 {
        (self.cpu_capacity_milli - self.cpu_allocatable_milli)
            .max(self.annotation_reserved_milli)
            .max(0)
    }
}

/// The node's CPU normalization ratio; 1 without the annotation, and 1 for a value that is not a
/// ratio in [1, 5] (the manager never writes one; scaling by a guess would be worse).
pub fn cpu_normalization_of(node: &Node) -> koord_api::cpu_normalization::NormalizationRatio {
    koord_api::cpu_normalization::NormalizationRatio::of_node_annotations(node.metadata.annotations.as_ref())
        .ok()
        .flatten()
        .unwrap_or_default()
}

pub(super) fn besteffort_dir(paths: &KubeCgroupPaths) -> String {
    paths.qos_dir(KubeQoSClass::BestEffort).to_string()
}

fn is_burst_candidate(p: &PodMeta) -> bool {
    p.is_running() && !matches!(p.qos, QoSClass::Lse | QoSClass::Lsr | QoSClass::Be)
}

pub(super) fn is_be(p: &PodMeta) -> bool {
    p.qos == QoSClass::Be || p.kube_qos == KubeQoSClass::BestEffort
}

/// Which cgroup values a round needs, so the live loop reads no more files than it uses.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadScope<'a> {
    /// BE pod and container quota/cpuset (only cpu_suppress's writes use them).
    pub be_pods: bool,
    /// The node's burst strategy when burst runs: burstable pods get their quota and burst read.
    pub burst: Option<&'a CpuBurstStrategy>,
    /// Skip pods whose resolved burst policy is `none` (the live loop: they only get burst
    /// reset to 0, which the executor's cache makes free, and reading them costs file I/O).
    pub skip_burst_none: bool,
    /// `namespace/name` of pods that had a burst policy other than `none` in an earlier round: read even when
    /// `none` now, so that their scaled CFS quota is reset to the limit (with burst 0).
    pub burst_recent: Option<&'a std::collections::HashSet<String>>,
    /// cpuset_policy runs ([`super::cpuset_policy_wanted`]): every running pod's QoS, pod and
    /// container `cpuset.cpus`.
    pub cpuset_policy: bool,
}

impl ReadScope<'_> {
    /// Everything (`koordlet plan`).
    pub fn all(burst: Option<&CpuBurstStrategy>) -> ReadScope<'_> {
        ReadScope {
            be_pods: true,
            burst,
            skip_burst_none: false,
            burst_recent: None,
            cpuset_policy: true,
        }
    }
}

/// The cgroup files the engine wants current values of: the besteffort quota and cpuset (real
/// BE limit, suppress), BE pods' quota and cpuset, burstable pods' quota and burst, as `scope`
/// says. Gatherers read exactly these.
pub fn cgroup_reads(
    pods: &[PodMeta],
    paths: &KubeCgroupPaths,
    scope: ReadScope<'_>,
) -> Vec<(String, &'static str)> {
    let be = besteffort_dir(paths);
    let mut reads = vec![(be.clone(), FILE_CFS_QUOTA), (be, FILE_CPUSET_CPUS)];
    if scope.cpuset_policy {
        super::cpuset_policy::reads(pods, paths, &mut reads);
    }
    for p in pods.iter().filter(|p| p.is_running()) {
        let files: &[&'static str] = if is_be(p) && p.kube_qos == KubeQoSClass::BestEffort {
            if !scope.be_pods {
                continue;
            }
            &[FILE_CFS_QUOTA, FILE_CPUSET_CPUS]
        } else if is_burst_candidate(p)
            && scope.burst.is_some_and(|s| {
                !scope.skip_burst_none
                    || scope
                        .burst_recent
                        .is_some_and(|r| !r.is_empty() && r.contains(&format!("{}/{}", p.namespace, p.name)))
                    || koord_api::config::resolve_pod_burst_for(s, &p.pod)
                        .config
                        .policy
                        .is_some_and(|policy| policy != koord_api::nodeslo::CpuBurstPolicy::None)
            })
        {
            &[FILE_CFS_QUOTA, FILE_CFS_BURST]
        } else {
            continue;
        };
        let dirs = std::iter::once(p.cgroup_dir(paths).to_string()).chain(
            p.containers
                .iter()
                .filter_map(|c| p.container_dir(paths, c))
                .map(|d| d.to_string()),
        );
        for dir in dirs {
            for f in files {
                reads.push((dir.clone(), *f));
            }
        }
    }
    reads
}

/// Eviction candidates of the strategy behind `feature` (its gate name): every running pod with
/// its usage, batch-cpu request and whether its `koordinator.sh/eviction-policy` lets `feature`
/// evict it; with the BE pods the policy exempts and why.
pub(super) fn candidates(input: &EngineInput<'_>, feature: &str) -> (Vec<EvictCandidate>, Vec<ExemptPod>) {
    let mut exempt = Vec::new();
    let candidates = input
        .pods
        .iter()
        .filter(|p| p.is_running())
        .map(|p| {
            let annotation = |key: &str| {
                p.pod
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(key))
                    .map(String::as_str)
            };
            let policy = EvictionPolicy::parse(annotation(ANNOTATION_EVICTION_POLICY));
            let refusal = policy.refusal(feature);
            let eviction_enabled = p.eviction_enabled();
            // The pods the strategy could pick but for the annotation: BE pods for the BE
            // strategies, opted-in pods for the node-level ones.
            let in_pool = if feature == memory_evict::BY_PRIORITY_FEATURE {
                eviction_enabled
            } else {
                p.qos == QoSClass::Be
            };
            if let Some(reason) = &refusal
                && in_pool
            {
                exempt.push(ExemptPod {
                    pod: format!("{}/{}", p.namespace, p.name),
                    reason: reason.clone(),
                });
            }
            let usage = input.usage.pods.get(p.uid.as_str()).copied().unwrap_or_default();
            let batch_cpu_request_milli = p
                .pod
                .spec
                .as_ref()
                .map(|s| {
                    s.containers
                        .iter()
                        .filter_map(|c| container_amounts(c).ok()?.batch_cpu_request())
                        .fold(0i64, i64::saturating_add)
                })
                .unwrap_or(0);
            EvictCandidate {
                uid: p.uid.as_str().to_owned(),
                namespace: p.namespace.clone(),
                name: p.name.clone(),
                qos: p.qos,
                priority: p.pod.spec.as_ref().and_then(|s| s.priority),
                cpu_usage_milli: usage.cpu_milli,
                batch_cpu_request_milli,
                memory_usage_bytes: usage.memory_bytes,
                being_evicted: input.in_flight.contains(p.uid.as_str()),
                eviction_allowed: refusal.is_none(),
                eviction_enabled,
                // Upstream reads an absent or unreadable annotation as 0.
                eviction_priority: annotation(names::ANNOTATION_EVICTION_PRIORITY)
                    .and_then(|v| v.trim().parse::<i32>().ok())
                    .map_or(0, i64::from),
                koordinator_priority: p
                    .pod
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(names::LABEL_KOORDINATOR_PRIORITY))
                    .and_then(|v| v.trim().parse::<i32>().ok())
                    .map(i64::from),
            }
        })
        .collect();
    (candidates, exempt)
}

/// Per-pod CPU usage for the suppress budget.
pub(super) fn suppress_usages(input: &EngineInput<'_>) -> Vec<CpuUsage> {
    input
        .pods
        .iter()
        .filter_map(|p| {
            let cpu = input.usage.pods.get(p.uid.as_str())?.cpu_milli?;
            Some(CpuUsage {
                be: is_be(p),
                usage_milli: cpu as i64,
            })
        })
        .collect()
}

fn state(input: &EngineInput<'_>, dir: CgroupDir) -> CgroupState {
    let key = dir.to_string();
    CgroupState {
        cfs_quota_us: input.cgroups.int(&key, FILE_CFS_QUOTA),
        cpuset: input.cgroups.cpusets.get(&key).cloned(),
        dir,
    }
}

/// The besteffort tree with current values.
pub(super) fn be_cgroups(input: &EngineInput<'_>) -> BeCgroups {
    BeCgroups {
        besteffort: state(input, input.paths.qos_dir(KubeQoSClass::BestEffort)),
        pods: input
            .pods
            .iter()
            .filter(|p| p.is_running() && p.kube_qos == KubeQoSClass::BestEffort)
            .map(|p| BePodCgroups {
                pod: state(input, p.cgroup_dir(input.paths)),
                containers: p
                    .containers
                    .iter()
                    .filter_map(|c| p.container_dir(input.paths, c))
                    .map(|d| state(input, d))
                    .collect(),
            })
            .collect(),
    }
}

pub(super) fn topology(input: &EngineInput<'_>) -> Vec<CpuInfo> {
    if !input.topology.is_empty() {
        return input.topology.to_vec();
    }
    let cpus = u32::try_from((input.node.cpu_capacity_milli.max(0) + 999) / 1000).unwrap_or(0);
    (0..cpus.min(4096))
        .map(|cpu| CpuInfo {
            cpu,
            core: cpu,
            socket: 0,
            node: 0,
        })
        .collect()
}

/// The `cpuset` of a pod's `scheduling.koordinator.sh/resource-status` annotation.
pub(super) fn bound_cpus(p: &PodMeta) -> Option<CpuList> {
    let text = p
        .pod
        .metadata
        .annotations
        .as_ref()?
        .get(names::ANNOTATION_RESOURCE_STATUS)?;
    crate::strategies::cpuset_policy::resource_status_cpus(text)
}

/// CPU topology and owners for suppress's cpuset policy.
pub(super) fn cpu_pools(input: &EngineInput<'_>) -> CpuPools {
    let mut pools = CpuPools {
        topology: topology(input),
        reserved: input.node.reserved_cpus.clone(),
        exclusive: super::cpuset_policy::exclusive_cpus(input),
        ..CpuPools::default()
    };
    if let KubeletCpuManager::Static { shared } = &input.node.kubelet_cpu_manager {
        pools.kubelet_static_policy = true;
        pools.kubelet_shared = shared.clone();
    }
    for p in input.pods.iter().filter(|p| p.is_running()) {
        let Some(cpus) = bound_cpus(p) else { continue };
        match p.qos {
            QoSClass::Lse => pools.lse = pools.lse.union(&cpus),
            QoSClass::Lsr => pools.lsr = pools.lsr.union(&cpus),
            QoSClass::System => pools.system_exclusive = pools.system_exclusive.union(&cpus),
            _ => {}
        }
    }
    pools
}

/// Burst's view of every pod, with its resolved config (node, pod strategy or annotation).
pub(super) fn burst_pods(input: &EngineInput<'_>, strategy: &CpuBurstStrategy) -> Vec<BurstPod> {
    input
        .pods
        .iter()
        .map(|p| {
            let decision = koord_api::config::resolve_pod_burst_for(strategy, &p.pod);
            let (config, config_source) = BurstParams::from_decision(&decision);
            let spec = p.spec_containers();
            let containers = p
                .containers
                .iter()
                .filter_map(|c| {
                    let id = c.id.as_ref()?.to_string();
                    let dir = p.container_dir(input.paths, c)?;
                    let key = dir.to_string();
                    let cpu_limit_milli = spec
                        .iter()
                        .find(|s| s.name == c.name)
                        .and_then(|s| container_amounts(s).ok())
                        .and_then(|a| a.limits.get("cpu").copied());
                    Some(BurstContainer {
                        name: c.name.clone(),
                        cpu_limit_milli,
                        cfs_quota_us: input.cgroups.int(&key, FILE_CFS_QUOTA),
                        cfs_burst_us: input.cgroups.int(&key, FILE_CFS_BURST),
                        throttled_ratio: input.cgroups.throttled.get(&key).copied(),
                        usage_milli: input.usage.containers.get(&id).copied(),
                        cgroup: dir,
                        id,
                    })
                })
                .collect();
            let cgroup = p.cgroup_dir(input.paths);
            let key = cgroup.to_string();
            BurstPod {
                namespace: p.namespace.clone(),
                name: p.name.clone(),
                qos: p.qos,
                active: p.is_running(),
                cfs_quota_us: input.cgroups.int(&key, FILE_CFS_QUOTA),
                cfs_burst_us: input.cgroups.int(&key, FILE_CFS_BURST),
                cgroup,
                config,
                config_source,
                containers,
            }
        })
        .collect()
}

/// The share pool's usage for burst's node state.
pub(super) fn share_pool(input: &EngineInput<'_>) -> SharePool {
    let bound = |p: &PodMeta| matches!(p.qos, QoSClass::Lse | QoSClass::Lsr);
    let lse_lsr_request_milli = input
        .pods
        .iter()
        .filter(|p| p.is_running() && bound(p))
        .filter_map(|p| koord_api::resources::pod_cpu_memory_requests(&p.pod).ok())
        .fold(0i64, |acc, r| acc.saturating_add(r.cpu_milli));
    let mut lse_lsr_be = 0.0;
    for p in input.pods.iter().filter(|p| bound(p) || is_be(p)) {
        if let Some(cpu) = input.usage.pods.get(p.uid.as_str()).and_then(|u| u.cpu_milli) {
            lse_lsr_be += cpu;
        }
    }
    SharePool {
        processors: topology(input).len(),
        lse_lsr_request_milli,
        node_usage_milli: input.usage.node_cpu_milli,
        lse_lsr_be_usage_milli: input.usage.node_cpu_milli.map(|_| lse_lsr_be),
    }
}
