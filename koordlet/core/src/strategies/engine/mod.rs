//! The strategy engine: one gathered input in, one plan out, for every QoS strategy at once.
//!
//! The live loop and `koordlet plan` both gather the same [`EngineInput`] (the live one from
//! the snapshot, the metric stores and cgroup reads; the offline one from YAML, where the
//! NodeMetric status stands for the current usage) and call [`run`]. The result lists the
//! cgroup writes in the order to apply them (be_limits, cpu_suppress, cpu_burst, cpu_qos), the pods to
//! evict with the numbers that caused it, and each strategy's key numbers or why it skipped.
//! A strategy whose gate is off or whose inputs are missing skips with a reason; nothing here
//! panics, reads a file or a clock.
//!
//! The live loop calls [`run_cached`] with an [`EngineCache`] it keeps between rounds: the same
//! decisions, but be_limits' per-pod results are reused while a pod does not change, and its
//! writes come back shared with the cache ([`EnginePlan::be_limits_round`]) instead of copied.

mod build;
mod cpuset_policy;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

use koord_api::NodeSLOSpec;
use koord_api::nodeslo::{CpuSuppressPolicy, ResourceThresholdStrategy};
use serde::Serialize;

pub use build::{NodeFacts, ReadScope, cgroup_reads, cpu_normalization_of};
pub use cpuset_policy::{cpuset_policy_wanted, rebuild_cpuset_allocations};

use super::be_limits::{self, BeLimitsCache, BeLimitsRound, BeLimitsSettings, BePodLimits, SkippedPod};
use super::cpu_burst::{self, BurstPlan, BurstState};
use super::cpu_evict::{self, BeCpu, BeCpuWindow, CpuEvictPlan};
use super::cpu_suppress::{self, SuppressPlan};
use super::cpuset::{CpuInfo, CpuList};
use super::eviction::EvictionPick;
use super::memory_evict::{self, MemoryEvictPlan};
use super::{CFS_PERIOD_US, CgroupWrite};
use crate::KubeCgroupPaths;
use crate::features::FeatureGates;
use crate::pod::PodMeta;

/// Latest usage of one pod.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PodUsage {
    /// CPU in milli-cores.
    pub cpu_milli: Option<f64>,
    /// Memory in bytes (per the NodeMetric memory collect policy).
    pub memory_bytes: Option<u64>,
}

/// BE CPU totals over a window: usage and batch-cpu requests, milli-cores.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BeCpuUsage {
    /// What BE pods used.
    pub usage_milli: f64,
    /// Σ batch-cpu requests of BE pods.
    pub request_milli: f64,
}

/// Measured usage the strategies look at.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UsageFacts {
    /// Latest node CPU usage, milli-cores.
    pub node_cpu_milli: Option<f64>,
    /// Latest node memory usage, bytes.
    pub node_memory_bytes: Option<u64>,
    /// Latest usage per pod UID.
    pub pods: BTreeMap<String, PodUsage>,
    /// Latest CPU usage per container ID (`<runtime>://<id>` as in the pod status), milli.
    pub containers: BTreeMap<String, f64>,
    /// BE totals averaged over the satisfaction window, with the number of samples.
    pub be_window: Option<(BeCpuUsage, u32)>,
    /// The latest BE totals.
    pub be_latest: Option<BeCpuUsage>,
    /// CPU usage of the NodeSLO's host applications.
    pub host_apps: Vec<HostAppUsage>,
}

/// Latest CPU usage of one NodeSLO host application.
#[derive(Debug, Clone, PartialEq)]
pub struct HostAppUsage {
    /// Its name in the NodeSLO.
    pub name: String,
    /// Counts as BE (upstream's `NonBEHostAppFilter` negated: QoS `BE` and cgroup base
    /// `KubepodsBesteffort`).
    pub be: bool,
    /// CPU in milli-cores.
    pub cpu_milli: f64,
}

/// What the cgroup files hold now (v1 units), keyed by directory relative to the root.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CgroupFacts {
    /// Integer files: `(dir, file) -> value` (`cpu.cfs_quota_us`, `cpu.cfs_burst_us`).
    pub ints: BTreeMap<(String, &'static str), i64>,
    /// `cpuset.cpus` per directory.
    pub cpusets: BTreeMap<String, CpuList>,
    /// Throttled periods / periods since the previous round, per container directory.
    pub throttled: BTreeMap<String, f64>,
    /// Which CPU QoS files the kernel has (probed once).
    pub cpu_qos_kernel: super::cpu_qos::CpuQosKernel,
}

impl CgroupFacts {
    /// An integer file's current value, if read.
    pub fn int(&self, dir: &str, file: &'static str) -> Option<i64> {
        self.ints.get(&(dir.to_owned(), file)).copied()
    }
}

/// Carried from one round to the next (the live loop keeps it; `plan` starts empty).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EngineState {
    /// Burst-time limiters per container.
    pub burst: BurstState,
    /// When satisfaction eviction last evicted (or the agent started: no eviction before a full
    /// cool-down of data exists, as upstream).
    pub cpu_evict_last: Option<f64>,
    /// When memory eviction last evicted.
    pub memory_evict_last: Option<f64>,
    /// cpuset_policy's allocations (the agent also keeps them in its state file).
    pub cpuset_policy: super::cpuset_policy::CpusetAllocations,
}

/// Switches and tunables of one run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EngineOptions {
    /// Whether cpu_suppress writes join the plan's writes. The live loop turns this off when
    /// the fast path owns suppress; `plan` keeps it on. The decision is reported either way.
    pub apply_cpu_suppress: bool,
    /// The collect interval, seconds (judges whether averages hold enough samples).
    pub collect_interval_seconds: f64,
    /// Pause after a satisfaction eviction round.
    pub cpu_evict_cool_down_seconds: f64,
    /// Pause after a memory eviction round.
    pub memory_evict_cool_down_seconds: f64,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            apply_cpu_suppress: true,
            collect_interval_seconds: 1.0,
            cpu_evict_cool_down_seconds: cpu_evict::DEFAULT_COOL_DOWN_SECONDS,
            memory_evict_cool_down_seconds: memory_evict::DEFAULT_COOL_DOWN_SECONDS,
        }
    }
}

/// Everything one round looks at.
#[derive(Debug, Clone)]
pub struct EngineInput<'a> {
    /// Node capacity, allocatable and reservation.
    pub node: &'a NodeFacts,
    /// The node's pods.
    pub pods: &'a [PodMeta],
    /// Where the kubelet puts pod cgroups.
    pub paths: &'a KubeCgroupPaths,
    /// The NodeSLO spec, once seen.
    pub node_slo: Option<&'a NodeSLOSpec>,
    /// Feature gates.
    pub gates: &'a FeatureGates,
    /// Measured usage.
    pub usage: &'a UsageFacts,
    /// Current cgroup values.
    pub cgroups: &'a CgroupFacts,
    /// CPU topology (empty: one core per CPU on one NUMA node, sized from the capacity).
    pub topology: &'a [CpuInfo],
    /// UIDs of pods with an eviction in flight: they count as released and are never picked.
    pub in_flight: &'a BTreeSet<String>,
    /// Carried state.
    pub state: &'a EngineState,
    /// Now, seconds since any origin the caller keeps.
    pub now_seconds: f64,
    /// Switches.
    pub options: EngineOptions,
}

/// A strategy's decision, or why it did not run.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Report<T> {
    /// It ran; its numbers.
    Ran(T),
    /// It skipped.
    Skipped {
        /// Why (gate off, no NodeSLO, input not measured yet, ...).
        skipped: String,
    },
}

impl<T> Report<T> {
    fn skipped(reason: impl Into<String>) -> Self {
        Report::Skipped {
            skipped: reason.into(),
        }
    }

    /// The decision, when the strategy ran.
    pub fn ran(&self) -> Option<&T> {
        match self {
            Report::Ran(t) => Some(t),
            Report::Skipped { .. } => None,
        }
    }
}

/// `strategies.be_limits` of the plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BeLimitsReport {
    /// BE pods get no CFS quota of their own while suppress runs in cfsQuota mode.
    pub suppress_by_cfs_quota: bool,
    /// Per-pod limits.
    pub pods: Vec<BePodLimits>,
    /// Pods left out with the reason.
    pub skipped: Vec<SkippedPod>,
}

/// `strategies.cpu_suppress` of the plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SuppressReport {
    /// The decision and its writes.
    #[serde(flatten)]
    pub plan: SuppressPlan,
    /// Whether its writes are in the plan's writes (off when the fast path owns suppress).
    pub applied: bool,
}

/// Each strategy's report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Strategies {
    /// BE cgroup limits from batch resources.
    pub be_limits: Report<BeLimitsReport>,
    /// BE CPU suppress.
    pub cpu_suppress: Report<SuppressReport>,
    /// CPU burst.
    pub cpu_burst: Report<BurstPlan>,
    /// Eviction by BE CPU satisfaction.
    pub cpu_evict: Report<CpuEvictPlan>,
    /// Eviction of BE pods by node memory usage.
    pub memory_evict: Report<MemoryEvictPlan>,
    /// Eviction of opted-in pods of any class by node memory usage (`MemoryEvict`).
    pub memory_evict_by_priority: Report<MemoryEvictPlan>,
    /// Class CPU identity (`cpu.idle` or group identity).
    pub cpu_qos: Report<super::cpu_qos::CpuQosPlan>,
    /// Core-scheduling cookies for LSR/LSE pods.
    pub core_sched: Report<super::cpu_qos::CoreSchedPlan>,
    /// CPU set policies (`exclusive` / `share` / `none`) and scheduler-bound LSE/LSR cpusets.
    pub cpuset_policy: Report<super::cpuset_policy::CpusetPolicyPlan>,
    /// Memory QoS (`memory.min`/`low`/`high`).
    pub memory_qos: Report<super::memory_qos::MemoryQosPlan>,
}

/// The plan of one round.
#[derive(Debug, Clone, PartialEq)]
pub struct EnginePlan {
    /// Cgroup writes in the order to apply. From [`run_cached`], without be_limits' writes
    /// (those are in [`EnginePlan::be_limits_round`], to apply before these).
    pub writes: Vec<CgroupWrite>,
    /// From [`run_cached`] when be_limits ran: its round, whose writes (borrowed from the cache)
    /// are applied first (they lead the plan order). Always `None` from [`run`], whose `writes` hold them.
    pub be_limits_round: Option<BeLimitsRound>,
    /// Pods to evict (BE only), each once, satisfaction picks first.
    pub evictions: Vec<EvictionPick>,
    /// Each strategy's numbers.
    pub strategies: Strategies,
    /// State for the next round.
    pub next_state: EngineState,
}

/// Adds a strategy's picks to the round's evictions, each pod once (the first strategy that
/// picked it names the Event).
fn add_picks(evictions: &mut Vec<EvictionPick>, picks: &[EvictionPick]) {
    for pick in picks {
        if !evictions.iter().any(|e| e.uid == pick.uid) {
            evictions.push(pick.clone());
        }
    }
}

fn gate_off(gates: &FeatureGates, gate: &str) -> Option<String> {
    (!gates.enabled(gate)).then(|| format!("feature gate {gate} is off"))
}

/// What the live loop keeps between rounds to decide faster: each BE pod's limits (see
/// [`BeLimitsCache`]). Decisions are the same as without it.
#[derive(Debug, Default)]
pub struct EngineCache {
    be_limits: BeLimitsCache,
}

impl EngineCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The BE limits cache.
    pub fn be_limits(&self) -> &BeLimitsCache {
        &self.be_limits
    }
}

/// be_limits' settings under these gates, NodeSLO and node CPU normalization ratio: BE quotas
/// are left to the besteffort parent while CPU suppress runs with policy `cfsQuota`, and divided
/// by the ratio otherwise. Shared by the QoS round and the runtime hooks so both decide the same
/// values.
pub fn be_limits_settings(
    gates: &FeatureGates,
    node_slo: Option<&NodeSLOSpec>,
    cpu_normalization: koord_api::cpu_normalization::NormalizationRatio,
) -> BeLimitsSettings {
    let threshold = node_slo.and_then(|s| s.resource_used_threshold_with_be.as_ref());
    BeLimitsSettings {
        suppress_by_cfs_quota: gates.enabled("BECPUSuppress")
            && threshold.is_some_and(|t| {
                t.enable == Some(true) && t.cpu_suppress_policy == Some(CpuSuppressPolicy::CfsQuota)
            }),
        cpu_normalization,
    }
}

/// Runs every strategy for one round.
pub fn run(input: &EngineInput<'_>) -> EnginePlan {
    run_with(input, None)
}

/// [`run`] for the live loop: be_limits' decisions come from (and update) `cache`, and its
/// writes are returned in [`EnginePlan::be_limits_round`] instead of [`EnginePlan::writes`].
pub fn run_cached(input: &EngineInput<'_>, cache: &mut EngineCache) -> EnginePlan {
    run_with(input, Some(cache))
}

fn run_with(input: &EngineInput<'_>, cache: Option<&mut EngineCache>) -> EnginePlan {
    let default_threshold = ResourceThresholdStrategy::default();
    let threshold = input
        .node_slo
        .and_then(|s| s.resource_used_threshold_with_be.as_ref());
    let mut writes = Vec::new();
    let mut be_limits_round = None;
    let mut next_state = input.state.clone();

    let be_limits = if let Some(r) = gate_off(input.gates, "BatchResource") {
        Report::skipped(r)
    } else {
        let settings = be_limits_settings(input.gates, input.node_slo, input.node.cpu_normalization);
        match cache {
            Some(cache) => {
                let round = cache.be_limits.decide(input.pods, input.paths, settings);
                let report = BeLimitsReport {
                    suppress_by_cfs_quota: settings.suppress_by_cfs_quota,
                    pods: round.pods().cloned().collect(),
                    skipped: round.skipped().cloned().collect(),
                };
                be_limits_round = Some(round);
                Report::Ran(report)
            }
            None => {
                let plan = be_limits::decide(input.pods, input.paths, settings);
                writes.extend(plan.writes);
                Report::Ran(BeLimitsReport {
                    suppress_by_cfs_quota: settings.suppress_by_cfs_quota,
                    pods: plan.pods,
                    skipped: plan.skipped,
                })
            }
        }
    };

    let cpu_suppress = match suppress(input, threshold) {
        Ok(plan) => {
            let applied = input.options.apply_cpu_suppress;
            if applied {
                writes.extend(plan.writes.iter().cloned());
            }
            Report::Ran(SuppressReport { plan, applied })
        }
        Err(reason) => Report::skipped(reason),
    };

    // BE containers' cpusets are suppress's when it runs; cpuset_policy writes them only
    // otherwise, so the two never write the same directory.
    let cpuset_policy = cpuset_policy::run(input, cpu_suppress.ran().is_some());
    if let Report::Ran(plan) = &cpuset_policy {
        writes.extend(plan.writes.iter().cloned());
        next_state.cpuset_policy = plan.next_state.clone();
    }

    let cpu_burst = match burst(input) {
        Ok(plan) => {
            writes.extend(plan.writes.iter().cloned());
            next_state.burst = plan.next_state.clone();
            Report::Ran(plan)
        }
        Err(reason) => {
            next_state.burst = BurstState::default();
            Report::skipped(reason)
        }
    };

    let (cpu_qos, core_sched) = (
        super::cpu_qos::engine_step(input, &mut writes),
        super::cpu_qos::engine_core_sched(input),
    );

    let (cpu_candidates, cpu_exempt) = build::candidates(input, cpu_evict::FEATURE);
    let strategy = threshold.unwrap_or(&default_threshold);
    let mut evictions: Vec<EvictionPick> = Vec::new();
    let cpu_evict = if let Some(r) = gate_off(input.gates, "BECPUEvict") {
        Report::skipped(r)
    } else if threshold.is_none() {
        Report::skipped("no resourceUsedThresholdWithBE in the NodeSLO")
    } else {
        let mut plan = cpu_evict::decide(&cpu_evict::CpuEvictInput {
            strategy,
            window: be_window(input),
            latest: input.usage.be_latest.map(|u| be_cpu(input, u)),
            collect_interval_seconds: input.options.collect_interval_seconds,
            batch_allocatable_milli: input.node.batch_cpu_allocatable_milli,
            pods: &cpu_candidates,
            now_seconds: input.now_seconds,
            last_eviction_seconds: input.state.cpu_evict_last,
            cool_down_seconds: input.options.cpu_evict_cool_down_seconds,
        });
        plan.exempt = cpu_exempt;
        if !plan.evictions.is_empty() {
            next_state.cpu_evict_last = Some(input.now_seconds);
        }
        evictions.extend(plan.evictions.iter().cloned());
        Report::Ran(plan)
    };
    // Upstream's two memory tasks: BEMemoryEvict, then MemoryEvict with the same threshold and
    // the shared cool-down, counting what BEMemoryEvict picked this round as released.
    let memory_task = |gate: &str,
                       decide: fn(&memory_evict::MemoryEvictInput<'_>) -> MemoryEvictPlan,
                       already_picked: &[EvictionPick]| {
        if let Some(r) = gate_off(input.gates, gate) {
            return Report::skipped(r);
        }
        if threshold.is_none() {
            return Report::skipped("no resourceUsedThresholdWithBE in the NodeSLO");
        }
        let (mut candidates, exempt) = build::candidates(input, gate);
        for pod in &mut candidates {
            if already_picked.iter().any(|e| e.uid == pod.uid) {
                pod.being_evicted = true;
            }
        }
        let mut plan = decide(&memory_evict::MemoryEvictInput {
            strategy,
            capacity_bytes: input.node.memory_capacity_bytes,
            used_bytes: input.usage.node_memory_bytes,
            pods: &candidates,
            now_seconds: input.now_seconds,
            last_eviction_seconds: input.state.memory_evict_last,
            cool_down_seconds: input.options.memory_evict_cool_down_seconds,
        });
        plan.exempt = exempt;
        Report::Ran(plan)
    };
    let memory_evict = memory_task(memory_evict::FEATURE, memory_evict::decide, &[]);
    let be_memory_picks = memory_evict
        .ran()
        .map(|p| p.evictions.clone())
        .unwrap_or_default();
    let memory_evict_by_priority = memory_task(
        memory_evict::BY_PRIORITY_FEATURE,
        memory_evict::decide_by_priority,
        &be_memory_picks,
    );
    for plan in [&memory_evict, &memory_evict_by_priority]
        .into_iter()
        .filter_map(Report::ran)
    {
        if !plan.evictions.is_empty() {
            next_state.memory_evict_last = Some(input.now_seconds);
        }
        add_picks(&mut evictions, &plan.evictions);
    }

    let memory_qos = super::memory_qos::from_engine(input, &mut writes);

    EnginePlan {
        writes,
        be_limits_round,
        evictions,
        strategies: Strategies {
            be_limits,
            cpu_suppress,
            cpu_burst,
            cpu_evict,
            memory_evict,
            memory_evict_by_priority,
            cpu_qos,
            core_sched,
            cpuset_policy,
            memory_qos,
        },
        next_state,
    }
}

fn suppress(
    input: &EngineInput<'_>,
    threshold: Option<&ResourceThresholdStrategy>,
) -> Result<SuppressPlan, String> {
    if let Some(r) = gate_off(input.gates, "BECPUSuppress") {
        return Err(r);
    }
    let Some(strategy) = threshold else {
        return Err("no resourceUsedThresholdWithBE in the NodeSLO".into());
    };
    let node_usage = input.usage.node_cpu_milli.filter(|u| u.is_finite());
    if strategy.enable == Some(true) && node_usage.is_none() {
        return Err("node CPU usage not measured yet".into());
    }
    let pods = build::suppress_usages(input);
    let host_apps: Vec<cpu_suppress::CpuUsage> = input
        .usage
        .host_apps
        .iter()
        .filter(|h| h.cpu_milli.is_finite())
        .map(|h| cpu_suppress::CpuUsage {
            be: h.be,
            usage_milli: h.cpu_milli as i64,
        })
        .collect();
    let cgroups = build::be_cgroups(input);
    let cpus = build::cpu_pools(input);
    Ok(cpu_suppress::decide(&cpu_suppress::SuppressInput {
        strategy,
        capacity_milli: input.node.cpu_capacity_milli,
        reserved_milli: input.node.reserved_milli(),
        node_usage_milli: node_usage.unwrap_or(0.0) as i64,
        pods: &pods,
        host_apps: &host_apps,
        cgroups: &cgroups,
        cpus: &cpus,
    }))
}

/// What the fast suppress loop needs from the round: the BE cgroup dirs (values left out: the
/// loop reads what it needs when it writes), the CPU pools, and the cgroups of the host
/// applications outside `kubepods`.
pub fn cpuset_scope(input: &EngineInput<'_>) -> super::fast_suppress::CpusetScope {
    let mut be = build::be_cgroups(input);
    let strip = |c: &mut cpu_suppress::CgroupState| {
        c.cfs_quota_us = None;
        c.cpuset = None;
    };
    strip(&mut be.besteffort);
    for p in &mut be.pods {
        strip(&mut p.pod);
        p.containers.iter_mut().for_each(strip);
    }
    let kubepods = input.paths.kubepods_dir();
    let host_apps = input
        .node_slo
        .and_then(|s| s.host_applications.as_deref())
        .unwrap_or(&[])
        .iter()
        .filter_map(|a| crate::paths::host_app_dir(a, input.paths))
        .filter(|d| !d.starts_with(&kubepods))
        .map(|d| d.to_string())
        .collect();
    super::fast_suppress::CpusetScope {
        be,
        pools: build::cpu_pools(input),
        host_apps,
    }
}

fn burst(input: &EngineInput<'_>) -> Result<BurstPlan, String> {
    if let Some(r) = gate_off(input.gates, "CPUBurst") {
        return Err(r);
    }
    let Some(strategy) = input.node_slo.and_then(|s| s.cpu_burst_strategy.as_ref()) else {
        return Err("no cpuBurstStrategy in the NodeSLO".into());
    };
    let pods = build::burst_pods(input, strategy);
    Ok(cpu_burst::decide(&cpu_burst::BurstInput {
        share_pool_threshold_percent: strategy
            .share_pool_threshold_percent
            .unwrap_or(cpu_burst::DEFAULT_SHARE_POOL_THRESHOLD_PERCENT),
        share_pool: build::share_pool(input),
        pods: &pods,
        now_seconds: input.now_seconds,
        state: &input.state.burst,
    }))
}

/// What BE may really use now: `min(|BE cpuset| × 1000, quota / period × 1000)` from the
/// besteffort cgroup (capacity when neither limits it).
pub fn be_real_limit_milli(input: &EngineInput<'_>) -> f64 {
    let dir = build::besteffort_dir(input.paths);
    let by_cpuset = input
        .cgroups
        .cpusets
        .get(&dir)
        .filter(|c| !c.is_empty())
        .map_or(input.node.cpu_capacity_milli as f64, |c| c.len() as f64 * 1000.0);
    let by_quota = input
        .cgroups
        .int(&dir, super::FILE_CFS_QUOTA)
        .filter(|q| *q > 0)
        .map_or(f64::INFINITY, |q| q as f64 * 1000.0 / CFS_PERIOD_US as f64);
    by_cpuset.min(by_quota)
}

fn be_cpu(input: &EngineInput<'_>, u: BeCpuUsage) -> BeCpu {
    BeCpu {
        usage_milli: u.usage_milli,
        real_limit_milli: be_real_limit_milli(input),
        request_milli: u.request_milli,
    }
}

fn be_window(input: &EngineInput<'_>) -> Option<BeCpuWindow> {
    input.usage.be_window.map(|(u, samples)| BeCpuWindow {
        average: be_cpu(input, u),
        samples,
    })
}
