//! CPU set policies (`koordinator.sh/cpuset-policy`, or `qos.gocrane.io/cpu-manager` as in
//! Crane's advanced CPU set manager): a pod asks for `none`, `exclusive` or `share`.
//!
//! - `exclusive`: each eligible container gets whole CPUs of its own ([`allocate::take_packed`]),
//!   and those CPUs leave every other container's cpuset on the node (BE and `none` pods too).
//! - `share`: each eligible container is bound to CPUs of its own choosing, which the others
//!   keep using.
//! - `none` (or no annotation): the shared pool, every online CPU not held exclusively (nor
//!   bound to LSE/LSR pods by the scheduler).
//!
//! Eligible: a container whose CPU limit is a whole number of CPUs (the request may be lower).
//! LSE and LSR pods the scheduler bound to CPUs (`scheduling.koordinator.sh/resource-status`)
//! get exactly those; BE containers get the BE pool here only when cpu_suppress does not own
//! their cpusets. The table of allocations is carried between rounds (and kept in a file by the
//! agent): a kept allocation is never moved, a policy change on a running pod re-pins it at
//! the next round, a deleted pod releases its CPUs. A request that cannot be met is reported
//! and the container stays in the shared pool: never half an allocation.

pub mod allocate;
mod kubelet;
mod pin;
mod request;
mod state;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;

use koord_api::QoSClass;
use serde::{Deserialize, Serialize};

pub use allocate::take_packed;
pub use kubelet::KubeletCpuManager;
pub use pin::container_cpus;
use pin::{targets, writes};
use request::{allocate_all, pod_name, whole_cpus};
pub use state::{Allocation, CpusetAllocations, STATE_VERSION, StateFileError};

use super::CgroupWrite;
use super::cpu_suppress::CgroupState;
use super::cpuset::{CpuInfo, CpuList};
use crate::error::ParseError;

/// Strategy name in plans and audit lines.
pub const STRATEGY: &str = "cpuset_policy";
/// The pod annotation that asks for a policy.
pub const ANNOTATION_CPUSET_POLICY: &str = "koordinator.sh/cpuset-policy";
/// Crane's name for the same annotation (accepted; ours wins when both are set).
pub const ANNOTATION_CRANE_CPU_MANAGER: &str = "qos.gocrane.io/cpu-manager";

/// What a pod asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CpusetPolicy {
    /// The shared pool.
    None,
    /// CPUs of its own that nobody else runs on.
    Exclusive,
    /// CPUs of its own that others still run on.
    Share,
}

impl CpusetPolicy {
    /// Parses an annotation value (`none`, `exclusive`, `share`; surrounding blanks ignored).
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        match text.trim() {
            "none" => Ok(CpusetPolicy::None),
            "exclusive" => Ok(CpusetPolicy::Exclusive),
            "share" => Ok(CpusetPolicy::Share),
            other => Err(ParseError::new(
                "cpuset policy",
                format!("{other:?} is none of none, exclusive, share"),
            )),
        }
    }

    /// The policy a pod's annotations ask for (`Ok(None)`: no annotation).
    pub fn of_annotations(
        annotations: Option<&BTreeMap<String, String>>,
    ) -> Result<Option<Self>, ParseError> {
        let Some(a) = annotations else { return Ok(None) };
        match a
            .get(ANNOTATION_CPUSET_POLICY)
            .or_else(|| a.get(ANNOTATION_CRANE_CPU_MANAGER))
        {
            Some(text) => Self::parse(text).map(Some),
            None => Ok(None),
        }
    }
}

impl fmt::Display for CpusetPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CpusetPolicy::None => "none",
            CpusetPolicy::Exclusive => "exclusive",
            CpusetPolicy::Share => "share",
        })
    }
}

/// One container of a [`PolicyPod`].
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyContainer {
    /// `spec.containers[].name`.
    pub name: String,
    /// Its CPU limit in milli-cores, if any.
    pub cpu_limit_milli: Option<i64>,
    /// Its cgroup with the current `cpuset.cpus` (`None`: not created yet).
    pub dir: Option<CgroupState>,
}

/// A running pod as this strategy sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyPod {
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// Koordinator QoS.
    pub qos: QoSClass,
    /// Counts as BE (koordinator BE or kube BestEffort): its cpuset is the BE pool's.
    pub be: bool,
    /// The annotation (`Ok(None)`: absent; `Err`: a value that does not parse).
    pub policy: Result<Option<CpusetPolicy>, String>,
    /// CPUs the scheduler bound the pod to (`resource-status` of LSE/LSR pods).
    pub bound: Option<CpuList>,
    /// The kube QoS directory above the pod, with its current cpuset.
    pub qos_dir: CgroupState,
    /// The pod directory, with its current cpuset.
    pub pod_dir: CgroupState,
    /// Its containers.
    pub containers: Vec<PolicyContainer>,
}

/// Everything the strategy looks at.
#[derive(Debug, Clone)]
pub struct CpusetPolicyInput<'a> {
    /// Every online CPU with its core, socket and NUMA node.
    pub topology: &'a [CpuInfo],
    /// `reservedCPUs` of the node reservation: never allocated.
    pub reserved: &'a CpuList,
    /// The running pods.
    pub pods: &'a [PolicyPod],
    /// The allocations of the previous round (or of the state file).
    pub state: &'a CpusetAllocations,
    /// Write BE containers' cpusets (the BE pool) too: cpu_suppress does not own them.
    pub manage_be: bool,
}

/// Something the strategy could not do, for the log, an Event on the pod and the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// `namespace/name`.
    pub pod: String,
    /// The pod's UID.
    #[serde(skip)]
    pub uid: String,
    /// The container, when one container is concerned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// What went wrong, for people.
    pub reason: String,
}

/// Pods the scheduler bound to CPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BoundPod {
    /// `namespace/name`.
    pub pod: String,
    /// The bound CPUs.
    pub cpus: String,
}

/// The plan (`strategies.cpuset_policy` of `koordlet plan`, plus writes and the next table).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CpusetPolicyPlan {
    /// CPUs held exclusively (by `exclusive` containers and LSE pods).
    pub exclusive: String,
    /// The shared pool `none` containers get.
    pub shared: String,
    /// The allocations after this round.
    pub allocations: Vec<Allocation>,
    /// LSE/LSR pods bound by the scheduler.
    pub bound: Vec<BoundPod>,
    /// What could not be done.
    pub problems: Vec<Problem>,
    /// Writes, parents widened before children.
    #[serde(skip)]
    pub writes: Vec<CgroupWrite>,
    /// The table to carry to the next round.
    #[serde(skip)]
    pub next_state: CpusetAllocations,
    /// CPUs BE must leave (exclusive allocations), for cpu_suppress's pools.
    #[serde(skip)]
    pub exclusive_cpus: CpuList,
    /// What a container created before the next round gets (for the runtime hooks).
    #[serde(skip)]
    pub runtime: RuntimeCpusets,
}

/// The pools and allocations of a round, for deciding the cpuset of a container the runtime
/// creates before the next round ([`RuntimeCpusets::container`]), as that round will.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeCpusets {
    /// The shared pool (`none` containers).
    pub shared: CpuList,
    /// The BE pool, when this strategy writes BE cpusets (cpu_suppress does not).
    pub be_pool: Option<CpuList>,
    /// Allocations by (pod UID, container name).
    pub allocations: BTreeMap<(String, String), CpuList>,
}

/// A pod as the runtime describes it, for [`RuntimeCpusets::container`].
#[derive(Debug, Clone, Copy)]
pub struct RuntimePod<'a> {
    /// `metadata.uid`.
    pub uid: &'a str,
    /// Counts as BE (koordinator BE or kube BestEffort).
    pub be: bool,
    /// The CPUs the scheduler bound it to (LSE/LSR, gate `CPUSetAllocator`).
    pub bound: Option<&'a CpuList>,
    /// The policy its annotation asks for.
    pub policy: Option<CpusetPolicy>,
}

impl RuntimeCpusets {
    /// The cpuset of a new container of `pod`, or `None` to leave it to the next round: an
    /// `exclusive`/`share` container without an allocation yet is allocated there (never
    /// half-allocated here), and a BE container is cpu_suppress's when it owns BE cpusets.
    pub fn container(&self, pod: &RuntimePod<'_>, container: &str) -> Option<CpuList> {
        let allocated = self.allocations.get(&(pod.uid.to_owned(), container.to_owned()));
        if pod.bound.is_none()
            && !pod.be
            && allocated.is_none()
            && matches!(pod.policy, Some(CpusetPolicy::Exclusive | CpusetPolicy::Share))
        {
            return None;
        }
        container_cpus(pod.bound, pod.be, allocated, &self.shared, self.be_pool.as_ref())
    }
}

/// The `cpuset` of a `scheduling.koordinator.sh/resource-status` annotation value (`None` when
/// absent or not parseable, as the round treats it).
pub fn resource_status_cpus(text: &str) -> Option<CpuList> {
    let status = koord_api::resource_status::parse_resource_status(text).ok()?;
    CpuList::parse(&status.cpuset?).ok()
}

/// Whether the strategy has anything to do: a pod asks for a policy (or names one that does
/// not parse), the scheduler bound an LSE/LSR pod to CPUs, allocations are still held, or the
/// shared pool was left smaller than the node and must be widened back.
pub fn wanted(pods: &[PolicyPod], state: &CpusetAllocations) -> bool {
    !state.allocations.is_empty()
        || state.narrowed
        || pods
            .iter()
            .any(|p| !matches!(p.policy, Ok(None)) || p.bound.is_some())
}

/// The shared pool for a given exclusive set: online − exclusive − LSE − LSR.
fn shared_after(online: &CpuList, lse: &CpuList, lsr: &CpuList, exclusive: &CpuList) -> CpuList {
    online.difference(exclusive).difference(lse).difference(lsr)
}

fn bound_of(pods: &[PolicyPod], qos: QoSClass, online: &CpuList) -> CpuList {
    pods.iter()
        .filter(|p| p.qos == qos)
        .filter_map(|p| p.bound.as_ref())
        .fold(CpuList::new(), |acc, c| acc.union(c))
        .intersection(online)
}

/// Decides one round.
pub fn decide(input: &CpusetPolicyInput<'_>) -> CpusetPolicyPlan {
    let online = CpuList::from_cpus(input.topology.iter().map(|c| c.cpu));
    let mut problems = Vec::new();
    let mut plan = CpusetPolicyPlan {
        exclusive: String::new(),
        shared: String::new(),
        allocations: Vec::new(),
        bound: Vec::new(),
        problems: Vec::new(),
        writes: Vec::new(),
        next_state: input.state.clone(),
        exclusive_cpus: input.state.exclusive(),
        runtime: RuntimeCpusets::default(),
    };
    if online.is_empty() {
        plan.problems.push(Problem {
            pod: String::new(),
            uid: String::new(),
            container: None,
            reason: "CPU topology unknown: allocations kept as they are, nothing written".into(),
        });
        return plan;
    }
    let lse = bound_of(input.pods, QoSClass::Lse, &online);
    let lsr = bound_of(input.pods, QoSClass::Lsr, &online);
    let table = allocate_all(input, &online, &lse, &lsr, &mut problems);
    let mut shared = shared_after(&online, &lse, &lsr, &table.exclusive);
    if shared.is_empty() {
        shared = online.difference(&table.exclusive).difference(&lse);
    }
    let mut be_pool = online
        .difference(&table.exclusive)
        .difference(&lse)
        .difference(input.reserved);
    if be_pool.is_empty() {
        be_pool = shared.clone();
    }
    let targets = targets(input, &table, &shared, &be_pool);
    plan.writes = writes(&targets);
    plan.exclusive = table.exclusive.union(&lse).to_string();
    plan.shared = shared.to_string();
    plan.exclusive_cpus = table.exclusive.clone();
    plan.bound = input
        .pods
        .iter()
        .filter_map(|p| {
            Some(BoundPod {
                pod: pod_name(p),
                cpus: p.bound.as_ref()?.to_string(),
            })
        })
        .collect();
    plan.next_state = CpusetAllocations::from_entries(table.accepted.into_values());
    plan.next_state.narrowed = shared != online;
    plan.runtime = RuntimeCpusets {
        shared: shared.clone(),
        be_pool: input.manage_be.then(|| be_pool.clone()),
        allocations: plan
            .next_state
            .allocations
            .iter()
            .map(|a| ((a.pod_uid.clone(), a.container.clone()), a.cpus.clone()))
            .collect(),
    };
    plan.allocations = plan.next_state.allocations.clone();
    plan.problems = problems;
    plan
}

/// Rebuilds the table from the cgroups when the state file is lost or corrupt: a container of
/// an `exclusive`/`share` pod whose current cpuset has exactly its whole-CPU limit and is not
/// the whole node is taken as pinned there. Overlapping exclusive claims are settled by the
/// next [`decide`] (the later one is allocated anew).
pub fn rebuild_from_cgroups(pods: &[PolicyPod], topology: &[CpuInfo]) -> CpusetAllocations {
    let online = CpuList::from_cpus(topology.iter().map(|c| c.cpu));
    let mut entries = Vec::new();
    for p in pods.iter().filter(|p| !p.be && p.bound.is_none()) {
        let Ok(Some(policy)) = p.policy else { continue };
        if policy == CpusetPolicy::None {
            continue;
        }
        for c in &p.containers {
            let Ok(count) = whole_cpus(c.cpu_limit_milli) else {
                continue;
            };
            let Some(cur) = c.dir.as_ref().and_then(|d| d.cpuset.as_ref()) else {
                continue;
            };
            if cur.len() == count && cur.is_subset(&online) && *cur != online {
                entries.push(Allocation {
                    pod_uid: p.uid.clone(),
                    namespace: p.namespace.clone(),
                    name: p.name.clone(),
                    container: c.name.clone(),
                    policy,
                    cpus: cur.clone(),
                });
            }
        }
    }
    // Whatever the lost file said, one round checks every container's set.
    CpusetAllocations {
        narrowed: true,
        ..CpusetAllocations::from_entries(entries)
    }
}
