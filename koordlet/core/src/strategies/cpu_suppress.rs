//! CPU suppress (gate BECPUSuppress): as LS usage grows, shrink what BE may use so that LS
//! plus BE stay under `cpuSuppressThresholdPercent` of the node.
//!
//! ```text
//! budget = capacity × threshold% − non-BE pod usage − non-BE host-app usage
//!          − max(system usage, node reservation)          (milli-cores, integer)
//! budget = max(budget, capacity × cpuSuppressMinPercent%)  when the floor is set
//! ```
//! Policy `cfsQuota` writes the besteffort cgroup's CFS quota; policy `cpuset` (default) gives
//! BE a CPU set of `ceil(budget / 1000)` CPUs chosen by [`super::cpuset::select_cpus`]. When the
//! NodeSLO disables the threshold strategies, BE gets back an unlimited quota and its full set.

use koord_api::nodeslo::{CpuSuppressPolicy, ResourceThresholdStrategy};
use serde::Serialize;

use super::cpuset::{CpuInfo, CpuList, select_cpus};
use super::{CFS_PERIOD_US, CgroupWrite, clamp_percent};
use crate::{CgroupDir, CgroupResource};

/// Strategy name in plans and audit lines.
pub const STRATEGY: &str = "cpu_suppress";
/// Default `cpuSuppressThresholdPercent`.
pub const DEFAULT_THRESHOLD_PERCENT: i64 = 65;
/// Smallest besteffort quota ever written (µs per 100 ms): BE always makes some progress.
pub const MIN_BE_QUOTA_US: i64 = 2000;
/// Smallest BE cpuset (CPUs), when that many are available.
pub const MIN_BE_CPUS: usize = 2;
/// Quota increase per round, in percent of the node's CPU (decreases are immediate).
pub const QUOTA_RAMP_UP_PERCENT: i64 = 10;
/// Quota changes smaller than this percent of the node's CPU are not written.
pub const QUOTA_MIN_CHANGE_PERCENT: i64 = 1;
/// cpuset growth per round, in percent of the node's CPUs (rounded up).
pub const CPUSET_RAMP_UP_PERCENT: usize = 10;

/// CPU usage of one pod or host application.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuUsage {
    /// Whether it counts as BE: Koordinator QoS BE or kube QoS BestEffort for pods; QoS BE in the
    /// besteffort cgroup for host applications. Pods with metrics but unknown to the pod list
    /// count as non-BE (upstream).
    pub be: bool,
    /// Latest usage in milli-cores.
    pub usage_milli: i64,
}

/// A BE cgroup directory and what it holds now (`None`: not read).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CgroupState {
    /// Directory relative to the controller root.
    pub dir: CgroupDir,
    /// Current `cpu.cfs_quota_us` (−1 unlimited).
    pub cfs_quota_us: Option<i64>,
    /// Current `cpuset.cpus`.
    pub cpuset: Option<CpuList>,
}

/// A BE pod's cgroup and its containers'.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BePodCgroups {
    /// Pod-level directory.
    pub pod: CgroupState,
    /// Container directories.
    pub containers: Vec<CgroupState>,
}

/// The besteffort tree suppress writes to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BeCgroups {
    /// The besteffort QoS directory (`kubepods/besteffort` or the systemd slice).
    pub besteffort: CgroupState,
    /// Its BE pods.
    pub pods: Vec<BePodCgroups>,
}

/// The node's CPUs and who owns which.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CpuPools {
    /// Every online logical CPU with its core, socket and NUMA node.
    pub topology: Vec<CpuInfo>,
    /// CPUs reserved by the node annotation `node.koordinator.sh/reservation` (`reservedCPUs`).
    pub reserved: CpuList,
    /// CPUs exclusively owned by SYSTEM-QoS pods.
    pub system_exclusive: CpuList,
    /// CPUs bound to LSE pods: BE never runs there.
    pub lse: CpuList,
    /// CPUs bound to LSR pods: BE may borrow them in proportion.
    pub lsr: CpuList,
    /// CPUs held by `exclusive` containers (cpuset_policy): BE never runs there.
    pub exclusive: CpuList,
    /// The kubelet runs the `static` CPU manager policy: it owns the QoS and pod dirs, so only
    /// BE container dirs are narrowed (as upstream), and only within the kubelet's shared pool.
    pub kubelet_static_policy: bool,
    /// The kubelet's shared pool (`defaultCpuSet`) under the `static` policy; empty: unknown.
    pub kubelet_shared: CpuList,
    /// Smallest BE cpuset; `None` is upstream's [`MIN_BE_CPUS`]. The agent never sets it; tests
    /// on machines with two CPUs set 1 so that a budget change can move the cpuset at all.
    pub min_be_cpus: Option<usize>,
}

impl CpuPools {
    /// What BE may ever use: all CPUs minus LSE, reserved, exclusive SYSTEM and cpuset_policy
    /// `exclusive` CPUs; under the kubelet's `static` policy, only its shared pool.
    pub fn be_full(&self) -> CpuList {
        let full = CpuList::from_cpus(self.topology.iter().map(|c| c.cpu))
            .difference(&self.lse)
            .difference(&self.reserved)
            .difference(&self.system_exclusive)
            .difference(&self.exclusive);
        if self.kubelet_static_policy && !self.kubelet_shared.is_empty() {
            full.intersection(&self.kubelet_shared)
        } else {
            full
        }
    }

    /// The smallest BE cpuset (CPUs), before availability.
    pub fn min_cpus(&self) -> usize {
        self.min_be_cpus.unwrap_or(MIN_BE_CPUS).max(1)
    }
}

/// CPUs the `cpuset` policy wants for `budget`: `max(ceil(budget / 1000), min)`, the budget
/// clamped to `0..capacity`.
pub fn wanted_cpus(b: &Budget, min_cpus: usize) -> usize {
    let budget = b.budget_milli.clamp(0, b.capacity_milli.max(0));
    usize::try_from(budget.saturating_add(999) / 1000)
        .unwrap_or(0)
        .max(min_cpus)
}

/// Everything suppress looks at.
#[derive(Debug, Clone)]
pub struct SuppressInput<'a> {
    /// `resourceUsedThresholdWithBE` of the NodeSLO.
    pub strategy: &'a ResourceThresholdStrategy,
    /// Node CPU capacity in milli-cores (capacity, not allocatable, as upstream).
    pub capacity_milli: i64,
    /// Node reservation in milli: `max(capacity − allocatable, reservation annotation)`.
    pub reserved_milli: i64,
    /// Latest node CPU usage in milli-cores.
    pub node_usage_milli: i64,
    /// Latest usage of every pod with metrics.
    pub pods: &'a [CpuUsage],
    /// Latest usage of every host application.
    pub host_apps: &'a [CpuUsage],
    /// The besteffort cgroup tree with current values.
    pub cgroups: &'a BeCgroups,
    /// CPU topology and owners.
    pub cpus: &'a CpuPools,
}

/// The budget and what went into it (milli-cores).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Budget {
    /// Node capacity.
    pub capacity_milli: i64,
    /// Effective `cpuSuppressThresholdPercent`.
    pub threshold_percent: i64,
    /// Effective `cpuSuppressMinPercent`, if set.
    pub min_percent: Option<i64>,
    /// Σ usage of non-BE pods.
    pub pod_non_be_milli: i64,
    /// Σ usage of non-BE host applications.
    pub host_app_non_be_milli: i64,
    /// `max(node − Σ pods − Σ host apps, reservation)`.
    pub system_milli: i64,
    /// The BE budget (may be negative before a policy clamps it).
    pub budget_milli: i64,
}

/// What the `cfsQuota` policy decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QuotaDecision {
    /// Current besteffort quota, if read.
    pub current_us: Option<i64>,
    /// The quota the budget asks for (`max(budget × 100, 2000)`).
    pub wanted_us: i64,
    /// The quota written (after the ramp-up cap), or `None` when the change is skipped.
    pub written_us: Option<i64>,
    /// `write`, `ramped` (capped increase), `small_change` (skipped) or `unchanged`.
    pub action: &'static str,
}

/// What the `cpuset` policy decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CpusetDecision {
    /// CPUs the budget asks for (`max(ceil(budget / 1000), 2)`).
    pub wanted_cpus: usize,
    /// CPUs given after the ramp-up cap and availability.
    pub given_cpus: usize,
    /// The BE CPU set.
    pub cpus: String,
    /// How many come from LSR-bound CPUs.
    pub from_lsr: usize,
}

/// The plan (the `strategies.cpu_suppress` object of `koordlet plan`, plus writes).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SuppressPlan {
    /// Whether `resourceUsedThresholdWithBE.enable` is true.
    pub enabled: bool,
    /// `cpuset` or `cfsQuota`.
    pub policy: &'static str,
    /// Why something was skipped, empty otherwise.
    pub reason: String,
    /// The budget with its inputs (absent when disabled).
    pub budget: Option<Budget>,
    /// `cfsQuota` decision.
    pub quota: Option<QuotaDecision>,
    /// `cpuset` decision.
    pub cpuset: Option<CpusetDecision>,
    /// Writes, in the order to apply.
    pub writes: Vec<CgroupWrite>,
}

/// Computes the BE budget.
pub fn budget(input: &SuppressInput<'_>) -> Budget {
    let s = input.strategy;
    let capacity = input.capacity_milli.max(0);
    let sum = |items: &[CpuUsage], be: Option<bool>| -> i64 {
        items
            .iter()
            .filter(|u| be.is_none_or(|b| u.be == b))
            .fold(0i64, |acc, u| acc.saturating_add(u.usage_milli.max(0)))
    };
    let pods_all = sum(input.pods, None);
    let hosts_all = sum(input.host_apps, None);
    let pod_non_be = sum(input.pods, Some(false));
    let host_non_be = sum(input.host_apps, Some(false));
    let system = input
        .node_usage_milli
        .max(0)
        .saturating_sub(pods_all)
        .saturating_sub(hosts_all)
        .max(0)
        .max(input.reserved_milli.max(0));
    let threshold = clamp_percent(
        s.cpu_suppress_threshold_percent
            .unwrap_or(DEFAULT_THRESHOLD_PERCENT),
    );
    let min_percent = s.cpu_suppress_min_percent.map(clamp_percent);
    let mut budget = (capacity.saturating_mul(threshold) / 100)
        .saturating_sub(pod_non_be)
        .saturating_sub(host_non_be)
        .saturating_sub(system);
    if let Some(min) = min_percent {
        budget = budget.max(capacity.saturating_mul(min) / 100);
    }
    Budget {
        capacity_milli: capacity,
        threshold_percent: threshold,
        min_percent,
        pod_non_be_milli: pod_non_be,
        host_app_non_be_milli: host_non_be,
        system_milli: system,
        budget_milli: budget,
    }
}

/// Decides suppress (or recovery) for one round.
pub fn decide(input: &SuppressInput<'_>) -> SuppressPlan {
    let s = input.strategy;
    let policy = s.cpu_suppress_policy.unwrap_or(CpuSuppressPolicy::Cpuset);
    let mut plan = SuppressPlan {
        enabled: s.enable == Some(true),
        policy: match policy {
            CpuSuppressPolicy::Cpuset => "cpuset",
            CpuSuppressPolicy::CfsQuota => "cfsQuota",
        },
        reason: String::new(),
        budget: None,
        quota: None,
        cpuset: None,
        writes: Vec::new(),
    };
    if !plan.enabled {
        recover_quota(input.cgroups, &mut plan.writes);
        recover_cpuset(input, &mut plan);
        return plan;
    }
    if input.capacity_milli <= 0 {
        plan.reason = "node CPU capacity unknown".into();
        return plan;
    }
    let b = budget(input);
    plan.budget = Some(b);
    match policy {
        CpuSuppressPolicy::CfsQuota => {
            let q = quota_decision(&b, input.cgroups.besteffort.cfs_quota_us);
            if let Some(v) = q.written_us {
                plan.writes.push(CgroupWrite::int(
                    &input.cgroups.besteffort.dir,
                    CgroupResource::CpuCfsQuota,
                    v,
                    STRATEGY,
                ));
            }
            plan.quota = Some(q);
            recover_cpuset(input, &mut plan);
        }
        CpuSuppressPolicy::Cpuset => {
            suppress_by_cpuset(input, &b, &mut plan);
            recover_quota(input.cgroups, &mut plan.writes);
        }
    }
    plan
}

/// The `cfsQuota` policy: budget → quota, floor, skip tiny changes, ramp up slowly.
pub fn quota_decision(b: &Budget, current_us: Option<i64>) -> QuotaDecision {
    let budget = b.budget_milli.clamp(0, b.capacity_milli);
    let wanted = budget.saturating_mul(CFS_PERIOD_US / 1000).max(MIN_BE_QUOTA_US);
    // Upstream rounds capacity up to whole cores for the ramp and skip thresholds.
    let node_quota = (b.capacity_milli.saturating_add(999) / 1000).saturating_mul(CFS_PERIOD_US);
    let ramp = node_quota * QUOTA_RAMP_UP_PERCENT / 100;
    let min_change = node_quota * QUOTA_MIN_CHANGE_PERCENT / 100;
    let decision = |written: Option<i64>, action| QuotaDecision {
        current_us,
        wanted_us: wanted,
        written_us: written,
        action,
    };
    match current_us {
        None => decision(Some(wanted), "write"),
        Some(cur) if cur == wanted => decision(None, "unchanged"),
        Some(cur)
            if wanted.saturating_sub(cur).saturating_abs() < min_change && wanted != MIN_BE_QUOTA_US =>
        {
            decision(None, "small_change")
        }
        Some(cur) if cur > 0 && wanted.saturating_sub(cur) > ramp => decision(Some(cur + ramp), "ramped"),
        Some(_) => decision(Some(wanted), "write"),
    }
}

fn suppress_by_cpuset(input: &SuppressInput<'_>, b: &Budget, plan: &mut SuppressPlan) {
    let pools = input.cpus;
    let candidates = pools.be_full();
    if candidates.is_empty() {
        plan.reason = "no CPU available to BE (topology unknown or all CPUs owned)".into();
        return;
    }
    let wanted = wanted_cpus(b, pools.min_cpus());
    let mut given = wanted;
    if let Some(old) = input.cgroups.besteffort.cpuset.as_ref().filter(|c| !c.is_empty()) {
        let step = (pools.topology.len() * CPUSET_RAMP_UP_PERCENT).div_ceil(100);
        given = given.min(old.len() + step);
    }
    given = given.min(candidates.len());
    let lsr_pool = candidates.intersection(&pools.lsr);
    let ls_pool = candidates.difference(&pools.lsr);
    // LSR CPUs are lent in proportion to their share of the candidates; a short pool borrows
    // from the other so the count is always met.
    let mut from_lsr = given * lsr_pool.len() / candidates.len();
    let mut from_ls = given - from_lsr;
    if from_ls > ls_pool.len() {
        from_lsr += from_ls - ls_pool.len();
        from_ls = ls_pool.len();
    }
    if from_lsr > lsr_pool.len() {
        from_ls += from_lsr - lsr_pool.len();
        from_lsr = lsr_pool.len();
    }
    let chosen = select_cpus(&pools.topology, &lsr_pool, from_lsr).union(&select_cpus(
        &pools.topology,
        &ls_pool,
        from_ls,
    ));
    plan.cpuset = Some(CpusetDecision {
        wanted_cpus: wanted,
        given_cpus: chosen.len(),
        cpus: chosen.to_string(),
        from_lsr,
    });
    let cg = input.cgroups;
    let [qos, pods, containers] = levels(cg);
    if pools.kubelet_static_policy {
        // The kubelet owns the QoS and pod dirs: only containers are narrowed.
        widen_parents_only(&[qos, pods], &chosen, &mut plan.writes);
        cpuset_writes(&[(containers, &chosen)], &mut plan.writes);
    } else {
        cpuset_writes(
            &[(qos, &chosen), (pods, &chosen), (containers, &chosen)],
            &mut plan.writes,
        );
    }
}

fn levels(cg: &BeCgroups) -> [Vec<&CgroupState>; 3] {
    [
        vec![&cg.besteffort],
        cg.pods.iter().map(|p| &p.pod).collect(),
        cg.pods.iter().flat_map(|p| &p.containers).collect(),
    ]
}

/// Writes each level's target to its dirs (levels parents first, targets nested: a child's
/// target is a subset of its parent's) so that no child is ever wider than its parent: pass 1,
/// top to bottom, widens each dir that lacks CPUs of its target to `current ∪ target`; pass 2,
/// bottom to top, narrows to the target. Dirs already equal are skipped.
fn cpuset_writes(levels: &[(Vec<&CgroupState>, &CpuList)], writes: &mut Vec<CgroupWrite>) {
    let mut after_widen: Vec<Vec<Option<CpuList>>> = Vec::new();
    for (dirs, target) in levels {
        let mut row = Vec::new();
        for dir in dirs {
            let now = match &dir.cpuset {
                Some(cur) if !target.is_subset(cur) => {
                    let wide = cur.union(target);
                    writes.push(CgroupWrite::cpus(
                        &dir.dir,
                        CgroupResource::CpusetCpus,
                        &wide,
                        STRATEGY,
                    ));
                    Some(wide)
                }
                other => other.clone(),
            };
            row.push(now);
        }
        after_widen.push(row);
    }
    for ((dirs, target), row) in levels.iter().zip(&after_widen).rev() {
        for (dir, now) in dirs.iter().zip(row) {
            if now.as_ref() != Some(*target) {
                writes.push(CgroupWrite::cpus(
                    &dir.dir,
                    CgroupResource::CpusetCpus,
                    target,
                    STRATEGY,
                ));
            }
        }
    }
}

/// Under the kubelet's static policy parents are never narrowed: a QoS or pod dir that lacks
/// CPUs of `need` (left narrow by an earlier run) is widened to `current ∪ need`, top-down,
/// so the containers' sets fit; dirs that hold `need` are not touched.
fn widen_parents_only(levels: &[Vec<&CgroupState>], need: &CpuList, writes: &mut Vec<CgroupWrite>) {
    for dirs in levels {
        for dir in dirs {
            if let Some(cur) = &dir.cpuset
                && !need.is_subset(cur)
            {
                writes.push(CgroupWrite::cpus(
                    &dir.dir,
                    CgroupResource::CpusetCpus,
                    &cur.union(need),
                    STRATEGY,
                ));
            }
        }
    }
}

fn recover_quota(cg: &BeCgroups, writes: &mut Vec<CgroupWrite>) {
    if cg.besteffort.cfs_quota_us != Some(-1) {
        writes.push(CgroupWrite::int(
            &cg.besteffort.dir,
            CgroupResource::CpuCfsQuota,
            -1,
            STRATEGY,
        ));
    }
}

fn recover_cpuset(input: &SuppressInput<'_>, plan: &mut SuppressPlan) {
    let full = input.cpus.be_full();
    if full.is_empty() {
        plan.reason = "BE cpuset not restored: CPU topology unknown".into();
        return;
    }
    let [qos, pods, containers] = levels(input.cgroups);
    if input.cpus.kubelet_static_policy {
        widen_parents_only(&[qos, pods], &full, &mut plan.writes);
        cpuset_writes(&[(containers, &full)], &mut plan.writes);
        return;
    }
    cpuset_writes(
        &[(qos, &full), (pods, &full), (containers, &full)],
        &mut plan.writes,
    );
}

#[cfg(test)]
#[path = "cpu_suppress_tests.rs"]
pub(crate) mod tests;
