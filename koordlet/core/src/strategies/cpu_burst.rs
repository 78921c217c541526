//! CPU burst (gate CPUBurst) for LS pods: kernel CFS burst (`cpu.cfs_burst_us` /
//! `cpu.max.burst`) sized from the CPU limit, and CFS quota scaling (×1.2 while throttled and
//! the share pool is not overloaded, ×0.8 when it is, within `[limit, limit ×
//! cfsQuotaBurstPercent%]`, for at most `cfsQuotaBurstPeriodSeconds` of full burst).
//!
//! The effective config of each pod (node strategy, pod-level strategy, pod annotation) is
//! resolved before this module and arrives with the name of the source that decided it, which
//! the plan carries so the live loop can log which strategy was picked for each pod.
//!
//! Every plan is ordered so that the kernel never holds a burst above the quota (it rejects
//! that with EINVAL; upstream's default burst percent hits it) and, on cgroup v1, never a container quota above its
//! pod's: bursts that fit the current quota are lowered first, quotas move (decreasing
//! containers, pod, increasing containers), then the remaining bursts are raised.

use koord_api::QoSClass;
use std::collections::BTreeMap;

use koord_api::config::{BurstSource, PodBurstDecision};
use koord_api::nodeslo::{CpuBurstConfig, CpuBurstPolicy};
use serde::Serialize;

pub use super::share_pool::{COOLING_FRACTION, NodeState, SharePool, node_state};
use super::{CgroupWrite, milli_cpu_to_quota};
use crate::{CgroupDir, CgroupResource};

/// Strategy name in plans and audit lines.
pub const STRATEGY: &str = "cpu_burst";
/// Default `cpuBurstPercent`.
pub const DEFAULT_CPU_BURST_PERCENT: i64 = 1000;
/// Default `cfsQuotaBurstPercent`.
pub const DEFAULT_CFS_QUOTA_BURST_PERCENT: i64 = 300;
/// Default `cfsQuotaBurstPeriodSeconds` (−1: no time limit).
pub const DEFAULT_CFS_QUOTA_BURST_PERIOD_SECONDS: i64 = -1;
/// Default `sharePoolThresholdPercent`.
pub const DEFAULT_SHARE_POOL_THRESHOLD_PERCENT: i64 = 50;
/// Quota factor while throttled.
pub const SCALE_UP_FACTOR: f64 = 1.2;
/// Quota factor when the share pool is overloaded.
pub const SCALE_DOWN_FACTOR: f64 = 0.8;
/// Largest burst the v1 interface accepts in our hands (upstream's validator).
pub const MAX_BURST_US: i64 = 100_000_000;

/// A pod's burst config with every default filled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BurstParams {
    /// The policy.
    pub policy: CpuBurstPolicy,
    /// Kernel burst in percent of the CPU limit.
    pub cpu_burst_percent: i64,
    /// Ceiling of the scaled quota in percent of the limit.
    pub cfs_quota_burst_percent: i64,
    /// Seconds of full burst allowed (−1: unlimited).
    pub cfs_quota_burst_period_seconds: i64,
}

impl BurstParams {
    /// Fills upstream's defaults into a (partial) config.
    pub fn from_config(c: &CpuBurstConfig) -> Self {
        BurstParams {
            policy: c.policy.unwrap_or(CpuBurstPolicy::None),
            cpu_burst_percent: c.cpu_burst_percent.unwrap_or(DEFAULT_CPU_BURST_PERCENT).max(0),
            cfs_quota_burst_percent: c
                .cfs_quota_burst_percent
                .unwrap_or(DEFAULT_CFS_QUOTA_BURST_PERCENT),
            cfs_quota_burst_period_seconds: c
                .cfs_quota_burst_period_seconds
                .unwrap_or(DEFAULT_CFS_QUOTA_BURST_PERIOD_SECONDS),
        }
    }

    /// The params and the source label of a pod from the api resolver
    /// (`koord_api::config::resolve_pod_burst`), ready for [`BurstPod`].
    pub fn from_decision(d: &PodBurstDecision) -> (Self, String) {
        (Self::from_config(&d.config), source_label(&d.source))
    }

    /// Whether the policy sets the kernel's CFS burst (`cpuBurstOnly`, `auto`).
    pub fn kernel_burst(&self) -> bool {
        matches!(self.policy, CpuBurstPolicy::CpuBurstOnly | CpuBurstPolicy::Auto)
    }

    /// Whether the policy scales the CFS quota (`cfsQuotaBurstOnly`, `auto`).
    pub fn quota_burst(&self) -> bool {
        matches!(
            self.policy,
            CpuBurstPolicy::CfsQuotaBurstOnly | CpuBurstPolicy::Auto
        )
    }
}

/// How the plan and the log name the source of a pod's config.
pub fn source_label(source: &BurstSource) -> String {
    match source {
        BurstSource::PodStrategy {
            index,
            override_pod,
            with_annotation,
        } => format!(
            "podStrategies[{index}] (overridePod={override_pod}{})",
            if *with_annotation { ", with annotation" } else { "" }
        ),
        BurstSource::PodAnnotation => "annotation koordinator.sh/cpuBurst".into(),
        BurstSource::Node => "node".into(),
    }
}

/// One container as burst sees it (`None`: not read / not measured).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BurstContainer {
    /// Container ID (keys the limiter state).
    pub id: String,
    /// Container name in the pod spec.
    pub name: String,
    /// cgroup directory relative to the controller root.
    pub cgroup: CgroupDir,
    /// CPU limit in milli-cores; containers without one get neither burst nor scaling.
    pub cpu_limit_milli: Option<i64>,
    /// Current `cpu.cfs_quota_us`.
    pub cfs_quota_us: Option<i64>,
    /// Current `cpu.cfs_burst_us`.
    pub cfs_burst_us: Option<i64>,
    /// Throttled periods / periods over the last collect window.
    pub throttled_ratio: Option<f64>,
    /// Latest CPU usage in milli-cores (feeds the burst-time limiter).
    pub usage_milli: Option<f64>,
}

/// One pod as burst sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct BurstPod {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Resolved Koordinator QoS; LSE, LSR and BE pods are never burst.
    pub qos: QoSClass,
    /// Phase Running or Pending.
    pub active: bool,
    /// Pod cgroup directory.
    pub cgroup: CgroupDir,
    /// Current pod `cpu.cfs_quota_us`.
    pub cfs_quota_us: Option<i64>,
    /// Current pod `cpu.cfs_burst_us`.
    pub cfs_burst_us: Option<i64>,
    /// Effective config.
    pub config: BurstParams,
    /// Which source decided `config` (e.g. `podStrategies[0]`, `annotation`, `node`).
    pub config_source: String,
    /// Its containers.
    pub containers: Vec<BurstContainer>,
}

/// Burst-time budget of one container: a token bucket of `period × (percent − 100)`
/// percent-seconds; running above the limit drains it, running below 60 % refills it, and
/// scale-up is allowed while tokens remain (upstream's limiter, deterministic: a new container
/// starts with a full bucket instead of a random one).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Limiter {
    /// Bucket size.
    pub capacity: f64,
    /// Tokens left.
    pub tokens: f64,
    /// When last updated, seconds.
    pub updated_seconds: f64,
}

/// State carried from one round to the next: one limiter per container ID.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct BurstState {
    /// Limiters by container ID.
    pub limiters: BTreeMap<String, Limiter>,
}

/// Everything burst looks at.
#[derive(Debug, Clone)]
pub struct BurstInput<'a> {
    /// Effective `sharePoolThresholdPercent`.
    pub share_pool_threshold_percent: i64,
    /// Share pool figures.
    pub share_pool: SharePool,
    /// Every pod on the node.
    pub pods: &'a [BurstPod],
    /// Now, seconds since the caller's origin.
    pub now_seconds: f64,
    /// State from the previous round.
    pub state: &'a BurstState,
}

/// Quota operation for a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum QuotaOp {
    /// ×1.2.
    ScaleUp,
    /// ×0.8.
    ScaleDown,
    /// Back to the limit's quota (policy without quota burst).
    Reset,
    /// Keep (clamped into the allowed range).
    Remain,
}

/// Per-container numbers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContainerBurst {
    /// Container ID.
    pub id: String,
    /// Container name in the pod spec.
    pub name: String,
    /// Burst after clamping to the quota, µs.
    pub burst_us: i64,
    /// Quota operation, when the container has a limit and a quota.
    pub quota_op: Option<QuotaOp>,
    /// Quota after this round, µs.
    pub quota_us: Option<i64>,
}

/// Per-pod decision, with the config source to log.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PodBurst {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Which strategy was picked for this pod.
    pub source: String,
    /// The effective config.
    pub config: BurstParams,
    /// Pod-level burst, µs.
    pub pod_burst_us: i64,
    /// Containers.
    pub containers: Vec<ContainerBurst>,
}

/// The plan (the `strategies.cpu_burst` object of `koordlet plan`, plus writes and next state).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BurstPlan {
    /// Share-pool state.
    pub node_state: NodeState,
    /// Share-pool usage ratio, when known.
    pub share_pool_ratio: Option<f64>,
    /// Burstable pods and what they get.
    pub pods: Vec<PodBurst>,
    /// Writes, in the order to apply.
    pub writes: Vec<CgroupWrite>,
    /// State for the next round.
    #[serde(skip)]
    pub next_state: BurstState,
}

/// Whether a pod may burst at all: not LSE/LSR (bound CPUs) nor BE, and Running/Pending.
pub fn burstable(pod: &BurstPod) -> bool {
    pod.active && !matches!(pod.qos, QoSClass::Lse | QoSClass::Lsr | QoSClass::Be)
}

/// `limit × cpuBurstPercent%` of a 100 ms period, in µs (0 without a limit or kernel burst).
pub fn static_burst_us(params: &BurstParams, cpu_limit_milli: Option<i64>) -> i64 {
    match cpu_limit_milli {
        Some(limit) if limit > 0 && params.kernel_burst() => limit
            .saturating_mul(params.cpu_burst_percent)
            .clamp(0, MAX_BURST_US),
        _ => 0,
    }
}

/// The burst the kernel accepts under `quota`: none when the quota is unlimited or unknown
/// (−1/`None`), at most the quota otherwise.
pub fn clamp_burst(burst: i64, quota: Option<i64>) -> i64 {
    match quota {
        Some(q) if q > 0 => burst.clamp(0, q),
        _ => 0,
    }
}

fn update_limiter(
    prev: Option<&Limiter>,
    params: &BurstParams,
    usage_percent: Option<f64>,
    now: f64,
) -> Option<Limiter> {
    if params.cfs_quota_burst_period_seconds < 0 {
        return None;
    }
    let capacity =
        params.cfs_quota_burst_period_seconds as f64 * (params.cfs_quota_burst_percent - 100).max(0) as f64;
    let stale = |l: &Limiter| {
        l.capacity != capacity
            || now - l.updated_seconds > 2.0 * params.cfs_quota_burst_period_seconds as f64
            || now < l.updated_seconds
    };
    let mut l = match prev {
        Some(l) if !stale(l) => *l,
        _ => {
            return Some(Limiter {
                capacity,
                tokens: capacity,
                updated_seconds: now,
            });
        }
    };
    let dt = (now - l.updated_seconds).floor();
    if let Some(pct) = usage_percent.filter(|p| p.is_finite()) {
        let pct = pct.floor();
        if pct >= 100.0 {
            l.tokens -= (pct - 100.0) * dt;
        } else if pct < 60.0 {
            l.tokens += (100.0 - pct) * dt;
        }
    }
    l.tokens = l.tokens.clamp(-capacity, capacity);
    l.updated_seconds = now;
    Some(l)
}

/// Decides burst for every pod in one round.
pub fn decide(input: &BurstInput<'_>) -> BurstPlan {
    let (state, ratio) = node_state(&input.share_pool, input.share_pool_threshold_percent);
    let mut plan = BurstPlan {
        node_state: state,
        share_pool_ratio: ratio,
        pods: Vec::new(),
        writes: Vec::new(),
        next_state: BurstState::default(),
    };
    for pod in input.pods.iter().filter(|p| burstable(p)) {
        let decision = decide_pod(pod, state, input, &mut plan.next_state, &mut plan.writes);
        plan.pods.push(decision);
    }
    plan
}

/// A burst to write and what the kernel holds for that cgroup now.
struct BurstSlot<'a> {
    dir: &'a CgroupDir,
    quota_now: Option<i64>,
    burst: i64,
    burst_now: Option<i64>,
}

fn decide_pod(
    pod: &BurstPod,
    node: NodeState,
    input: &BurstInput<'_>,
    next: &mut BurstState,
    writes: &mut Vec<CgroupWrite>,
) -> PodBurst {
    let params = &pod.config;
    // (cgroup, old quota, new quota) for containers, and their bursts.
    let mut quota_moves: Vec<(&CgroupDir, i64, i64)> = Vec::new();
    let mut bursts: Vec<BurstSlot<'_>> = Vec::new();
    let mut containers = Vec::new();
    let mut pod_delta = 0i64;
    let mut pod_static = 0i64;
    for c in &pod.containers {
        let base = c.cpu_limit_milli.filter(|l| *l > 0).map(milli_cpu_to_quota);
        let mut op = None;
        let mut quota_after = c.cfs_quota_us;
        if let (Some(base), Some(cur)) = (base, c.cfs_quota_us.filter(|q| *q > 0)) {
            let ceil = if params.cfs_quota_burst_percent > 100 {
                base.saturating_mul(params.cfs_quota_burst_percent) / 100
            } else {
                base
            };
            let usage_pct = c
                .usage_milli
                .zip(c.cpu_limit_milli)
                .map(|(u, l)| u / l as f64 * 100.0);
            let limiter = if params.quota_burst() {
                update_limiter(
                    input.state.limiters.get(&c.id),
                    params,
                    usage_pct,
                    input.now_seconds,
                )
            } else {
                None
            };
            if let Some(l) = limiter {
                next.limiters.insert(c.id.clone(), l);
            }
            let mut o = if !params.quota_burst() {
                QuotaOp::Reset
            } else if limiter.is_some_and(|l| l.tokens <= 0.0) {
                QuotaOp::ScaleDown
            } else if c.throttled_ratio.is_some_and(|r| r > 0.0) {
                QuotaOp::ScaleUp
            } else {
                QuotaOp::Remain
            };
            o = match (node, o) {
                (NodeState::Overload, QuotaOp::ScaleUp | QuotaOp::Remain) => QuotaOp::ScaleDown,
                (NodeState::Cooling | NodeState::Unknown, QuotaOp::ScaleUp) => QuotaOp::Remain,
                (_, o) => o,
            };
            let target = match o {
                QuotaOp::ScaleUp => (cur as f64 * SCALE_UP_FACTOR) as i64,
                QuotaOp::ScaleDown => (cur as f64 * SCALE_DOWN_FACTOR) as i64,
                QuotaOp::Reset => base,
                QuotaOp::Remain => cur,
            }
            .clamp(base, ceil.max(base));
            if target != cur {
                quota_moves.push((&c.cgroup, cur, target));
                pod_delta = pod_delta.saturating_add(target - cur);
            }
            op = Some(o);
            quota_after = Some(target);
        }
        let wanted = static_burst_us(params, c.cpu_limit_milli);
        pod_static = pod_static.saturating_add(wanted);
        let burst = clamp_burst(wanted, quota_after);
        bursts.push(BurstSlot {
            dir: &c.cgroup,
            quota_now: c.cfs_quota_us,
            burst,
            burst_now: c.cfs_burst_us,
        });
        containers.push(ContainerBurst {
            id: c.id.clone(),
            name: c.name.clone(),
            burst_us: burst,
            quota_op: op,
            quota_us: quota_after,
        });
    }
    let pod_quota_after = match pod.cfs_quota_us {
        Some(q) if q > 0 && pod_delta != 0 => Some(q.saturating_add(pod_delta).max(1000)),
        other => other,
    };
    let pod_burst = clamp_burst(pod_static.min(MAX_BURST_US), pod_quota_after);
    bursts.push(BurstSlot {
        dir: &pod.cgroup,
        quota_now: pod.cfs_quota_us,
        burst: pod_burst,
        burst_now: pod.cfs_burst_us,
    });

    // Phase A: bursts that already fit the quota the kernel holds now.
    let fits_now = |old_q: Option<i64>, b: i64| old_q.is_some_and(|q| q == -1 || (q > 0 && b <= q));
    let mut deferred = Vec::new();
    for slot in &bursts {
        if slot.burst_now == Some(slot.burst) {
            continue;
        }
        if fits_now(slot.quota_now, slot.burst) {
            writes.push(CgroupWrite::int(
                slot.dir,
                CgroupResource::CpuCfsBurst,
                slot.burst,
                STRATEGY,
            ));
        } else {
            deferred.push((slot.dir, slot.burst));
        }
    }
    // Phase B: quotas; a v1 child quota may never exceed its parent's.
    for &(dir, _, new) in quota_moves.iter().filter(|(_, old, new)| new < old) {
        writes.push(CgroupWrite::int(dir, CgroupResource::CpuCfsQuota, new, STRATEGY));
    }
    if let (Some(old), Some(new)) = (pod.cfs_quota_us, pod_quota_after)
        && old != new
    {
        writes.push(CgroupWrite::int(
            &pod.cgroup,
            CgroupResource::CpuCfsQuota,
            new,
            STRATEGY,
        ));
    }
    for &(dir, _, new) in quota_moves.iter().filter(|(_, old, new)| new > old) {
        writes.push(CgroupWrite::int(dir, CgroupResource::CpuCfsQuota, new, STRATEGY));
    }
    // Phase C: bursts that needed the new quota.
    for (dir, b) in deferred {
        writes.push(CgroupWrite::int(dir, CgroupResource::CpuCfsBurst, b, STRATEGY));
    }
    PodBurst {
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        source: pod.config_source.clone(),
        config: pod.config,
        pod_burst_us: pod_burst,
        containers,
    }
}

#[cfg(test)]
#[path = "cpu_burst_tests.rs"]
pub(crate) mod tests;
