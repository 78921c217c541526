//! CPU eviction by BE satisfaction (gate BECPUEvict, seed 002).
//!
//! Suppress can squeeze many BE pods onto few CPUs; when the CPU they really get (the real BE
//! limit) stays far below what they requested while they use almost all of it, evicting some
//! is better than starving all. `satisfaction = real BE limit / BE request`; at or below the
//! lower percent, with BE usage ≥ `cpuEvictBEUsageThresholdPercent` of the limit, release
//! `request × (upper − satisfaction)` milli-cores of batch-cpu requests.

use koord_api::nodeslo::{CpuEvictPolicy, ResourceThresholdStrategy};
use serde::Serialize;

use super::eviction::{EvictCandidate, EvictionPick, ExemptPod, cooling_down, select_victims};

/// The feature (gate) name a pod's `koordinator.sh/eviction-policy` must list for this
/// strategy to evict it.
pub const FEATURE: &str = "BECPUEvict";
/// Strategy name in plans and audit lines.
pub const STRATEGY: &str = "cpu_evict";
/// Event reason of the evictions this strategy asks for.
pub const REASON: &str = "EvictPodByBECPUSatisfaction";
/// Default BE usage threshold (percent of its limit) when the NodeSLO leaves it unset.
pub const DEFAULT_BE_USAGE_THRESHOLD_PERCENT: i64 = 90;
/// Default averaging window in seconds (upstream's documented default).
pub const DEFAULT_TIME_WINDOW_SECONDS: i64 = 1;
/// Upstream's default pause after an eviction round (`--cpu-evict-cool-time-seconds`).
pub const DEFAULT_COOL_DOWN_SECONDS: f64 = 20.0;
/// Satisfaction lower percent must be in (0, this].
pub const MAX_LOWER_PERCENT: i64 = 60;

/// BE CPU totals (the `node_be` metric), in milli-cores.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BeCpu {
    /// CPU the besteffort cgroup used.
    pub usage_milli: f64,
    /// What BE may really use: `min(len(BE cpuset) × 1000, quota / period × 1000)`.
    pub real_limit_milli: f64,
    /// Σ `kubernetes.io/batch-cpu` requests of BE pods.
    pub request_milli: f64,
}

/// The averaged BE totals over the window and how many samples the average holds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BeCpuWindow {
    /// Average over the window.
    pub average: BeCpu,
    /// Samples in the window.
    pub samples: u32,
}

/// Everything satisfaction eviction looks at; times are seconds since the caller's origin.
#[derive(Debug, Clone)]
pub struct CpuEvictInput<'a> {
    /// `resourceUsedThresholdWithBE` of the NodeSLO.
    pub strategy: &'a ResourceThresholdStrategy,
    /// Average over `max(cpuEvictTimeWindowSeconds, collect interval)` ([`window_seconds`]).
    pub window: Option<BeCpuWindow>,
    /// The latest sample (2 collect intervals).
    pub latest: Option<BeCpu>,
    /// Collect interval in seconds (to judge whether the window holds enough samples).
    pub collect_interval_seconds: f64,
    /// Node allocatable `kubernetes.io/batch-cpu` in milli (policy `evictByAllocatable`).
    pub batch_allocatable_milli: Option<i64>,
    /// Every pod on the node; only BE pods are ever picked.
    pub pods: &'a [EvictCandidate],
    /// Now.
    pub now_seconds: f64,
    /// When this strategy last evicted; the caller sets it to its start time so no eviction
    /// happens before a full cool-down of data exists (upstream behaviour).
    pub last_eviction_seconds: Option<f64>,
    /// Cool-down after an eviction round ([`DEFAULT_COOL_DOWN_SECONDS`]).
    pub cool_down_seconds: f64,
}

/// What satisfaction eviction decided and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CpuEvictAction {
    /// `resourceUsedThresholdWithBE.enable` is not true.
    Disabled,
    /// Inputs missing, too few samples, or invalid config (see `reason`).
    Skipped,
    /// Within the cool-down after the last eviction.
    CoolingDown,
    /// Satisfaction or usage do not call for eviction.
    Satisfied,
    /// Pods already being evicted cover the release.
    CoveredInFlight,
    /// Pods picked.
    Evict,
}

/// The decision with its numbers (the `strategies.cpu_evict` object of `koordlet plan`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CpuEvictPlan {
    /// What was decided.
    pub action: CpuEvictAction,
    /// Why, in words.
    pub reason: String,
    /// Window used, seconds.
    pub window_seconds: f64,
    /// `limit / request` over the window, when computable.
    pub satisfaction: Option<f64>,
    /// `usage / limit` over the window.
    pub be_usage_ratio: Option<f64>,
    /// Milli-cores of batch-cpu requests to release.
    pub release_milli: i64,
    /// What pods already being evicted free.
    pub in_flight_milli: i64,
    /// In-flight plus this plan's picks.
    pub released_milli: i64,
    /// Pods to evict, in order.
    pub evictions: Vec<EvictionPick>,
    /// BE pods whose `koordinator.sh/eviction-policy` keeps them out of this strategy's picks.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub exempt: Vec<ExemptPod>,
}

/// Satisfaction thresholds after validation.
#[derive(Debug, Clone, Copy)]
struct Thresholds {
    lower: f64,
    upper: f64,
    usage: f64,
}

fn thresholds(s: &ResourceThresholdStrategy) -> Result<Thresholds, String> {
    let (Some(lower), Some(upper)) = (
        s.cpu_evict_be_satisfaction_lower_percent,
        s.cpu_evict_be_satisfaction_upper_percent,
    ) else {
        return Err("cpuEvictBESatisfactionLowerPercent/UpperPercent not set".into());
    };
    if !(lower > 0 && lower <= MAX_LOWER_PERCENT && upper > 0 && upper < 100 && upper >= lower) {
        return Err(format!(
            "satisfaction lower {lower} must be in (0, 60], upper {upper} in (0, 100) and >= lower"
        ));
    }
    let usage = super::clamp_percent(
        s.cpu_evict_be_usage_threshold_percent
            .unwrap_or(DEFAULT_BE_USAGE_THRESHOLD_PERCENT),
    );
    Ok(Thresholds {
        lower: lower as f64 / 100.0,
        upper: upper as f64 / 100.0,
        usage: usage as f64 / 100.0,
    })
}

/// The averaging window: `max(cpuEvictTimeWindowSeconds, collect interval)`.
pub fn window_seconds(s: &ResourceThresholdStrategy, collect_interval_seconds: f64) -> f64 {
    let configured = s
        .cpu_evict_time_window_seconds
        .unwrap_or(DEFAULT_TIME_WINDOW_SECONDS)
        .max(0) as f64;
    configured.max(collect_interval_seconds.max(0.0))
}

/// Trust rule for averages: the samples must cover at least a third of the window
/// (`samples × interval ≥ window / 3`, upstream's rule) and there must be at least one.
pub fn enough_samples(samples: u32, collect_interval_seconds: f64, window_seconds: f64) -> bool {
    samples >= 1 && f64::from(samples) * collect_interval_seconds >= window_seconds / 3.0
}

/// The release one set of BE totals calls for, or why none.
fn release_for(be: &BeCpu, limit: f64, t: Thresholds) -> Result<(i64, f64, f64), String> {
    if !limit.is_finite() || limit <= 0.0 {
        return Err(format!("BE limit {limit:.0}m is not positive"));
    }
    let usage_ratio = be.usage_milli / limit;
    if limit >= 1000.0 && (usage_ratio < t.usage || usage_ratio.is_nan()) {
        return Err(format!(
            "BE uses {:.0}% of its limit, below {:.0}%",
            usage_ratio * 100.0,
            t.usage * 100.0
        ));
    }
    if be.request_milli <= 0.0 || be.request_milli.is_nan() {
        return Err("no BE CPU request".into());
    }
    let satisfaction = limit / be.request_milli;
    if satisfaction > t.lower {
        return Err(format!(
            "satisfaction {satisfaction:.2} above lower {:.2}",
            t.lower
        ));
    }
    let release = be.request_milli * (t.upper - satisfaction);
    // Truncation toward zero, as upstream; saturating on absurd inputs.
    let release = if release.is_finite() { release as i64 } else { 0 };
    if release <= 0 {
        return Err("nothing to release".into());
    }
    Ok((release, satisfaction, usage_ratio))
}

fn request_of(p: &EvictCandidate) -> f64 {
    p.batch_cpu_request_milli as f64
}

/// How much of its request a BE pod uses: the victim tie-breaker (busiest first). A pod with no
/// request frees nothing toward the target and sorts last.
fn usage_per_request(p: &EvictCandidate) -> f64 {
    if p.batch_cpu_request_milli > 0 {
        p.cpu_usage_milli.unwrap_or(0.0) / p.batch_cpu_request_milli as f64
    } else {
        0.0
    }
}

/// Decides satisfaction eviction for one round.
pub fn decide(input: &CpuEvictInput<'_>) -> CpuEvictPlan {
    let s = input.strategy;
    let window = window_seconds(s, input.collect_interval_seconds);
    let mut plan = CpuEvictPlan {
        action: CpuEvictAction::Skipped,
        reason: String::new(),
        window_seconds: window,
        satisfaction: None,
        be_usage_ratio: None,
        release_milli: 0,
        in_flight_milli: 0,
        released_milli: 0,
        evictions: Vec::new(),
        exempt: Vec::new(),
    };
    if s.enable != Some(true) {
        plan.action = CpuEvictAction::Disabled;
        return plan;
    }
    let t = match thresholds(s) {
        Ok(t) => t,
        Err(e) => {
            plan.reason = e;
            return plan;
        }
    };
    if cooling_down(
        input.now_seconds,
        input.last_eviction_seconds,
        input.cool_down_seconds,
    ) {
        plan.action = CpuEvictAction::CoolingDown;
        return plan;
    }
    let Some(w) = input.window else {
        plan.reason = "no BE CPU samples in the window".into();
        return plan;
    };
    if !enough_samples(w.samples, input.collect_interval_seconds, window) {
        plan.reason = format!(
            "{} samples do not cover a third of the {window}s window",
            w.samples
        );
        return plan;
    }
    let limit_of = |be: &BeCpu| match s.cpu_evict_policy {
        Some(CpuEvictPolicy::EvictByAllocatable) => match input.batch_allocatable_milli {
            Some(0) => 1.0,
            Some(a) => a as f64,
            None => -1.0,
        },
        _ => be.real_limit_milli,
    };
    let avg_limit = limit_of(&w.average);
    let (avg_release, satisfaction, usage_ratio) = match release_for(&w.average, avg_limit, t) {
        Ok(r) => r,
        Err(e) => {
            plan.action = CpuEvictAction::Satisfied;
            plan.reason = e;
            return plan;
        }
    };
    plan.satisfaction = Some(satisfaction);
    plan.be_usage_ratio = Some(usage_ratio);
    // The latest values guard against acting on a stale average: when the BE request or limit
    // moved, release at most what the current values call for (nothing if they call for none).
    let release = match input.latest {
        Some(now)
            if (now.request_milli - w.average.request_milli).abs() >= 0.5
                || (limit_of(&now) - avg_limit).abs() >= 0.5 =>
        {
            match release_for(&now, limit_of(&now), t) {
                Ok((r, _, _)) => avg_release.min(r),
                Err(e) => {
                    plan.action = CpuEvictAction::Satisfied;
                    plan.reason = format!("latest sample: {e}");
                    return plan;
                }
            }
        }
        _ => avg_release,
    };
    plan.release_milli = release;
    let selection = select_victims(input.pods, release as f64, request_of, usage_per_request);
    plan.in_flight_milli = selection.in_flight as i64;
    plan.released_milli = selection.released as i64;
    plan.action = if selection.picks.is_empty() {
        CpuEvictAction::CoveredInFlight
    } else {
        CpuEvictAction::Evict
    };
    if let Some(why) = selection.shortfall(release as f64) {
        plan.reason = why;
    }
    plan.evictions = selection.evictions(STRATEGY, REASON, |p| {
        format!(
            "BE CPU satisfaction {satisfaction:.2} <= {:.2} with BE usage {:.0}% of its limit, \
             release {release}m batch-cpu; pod requests {}m and uses {:.0}m",
            t.lower,
            usage_ratio * 100.0,
            p.batch_cpu_request_milli,
            p.cpu_usage_milli.unwrap_or(0.0)
        )
    });
    plan
}

#[cfg(test)]
#[path = "cpu_evict_tests.rs"]
mod tests;
