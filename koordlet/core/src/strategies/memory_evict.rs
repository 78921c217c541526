//! Memory eviction: when node memory usage reaches `memoryEvictThresholdPercent`, evict pods
//! until usage would be back at `memoryEvictLowerPercent` (default threshold − 2).
//!
//! * [`decide`] (gate `BEMemoryEvict`, seed 001): BE pods, lowest priority and largest usage
//!   first.
//! * [`decide_by_priority`] (gate `MemoryEvict`): pods of any QoS class that opted in with the
//!   label `koordinator.sh/eviction-enabled=true` and whose priority is at most
//!   `evictEnabledPriorityThreshold`, by `koordinator.sh/eviction-priority`, priority, the
//!   `koordinator.sh/priority` label, then largest usage. When both gates are on, the BE pods
//!   picked by [`decide`] in the same round count as released (the caller marks them).

use koord_api::nodeslo::ResourceThresholdStrategy;
use serde::Serialize;

use super::eviction::{
    EvictCandidate, EvictionPick, ExemptPod, cooling_down, select_opted_in, select_victims,
};

/// The feature (gate) name a pod's `koordinator.sh/eviction-policy` must list for this
/// strategy to evict it.
pub const FEATURE: &str = "BEMemoryEvict";
/// Strategy name in plans and audit lines.
pub const STRATEGY: &str = "memory_evict";
/// Event reason of the evictions this strategy asks for.
pub const REASON: &str = "EvictPodByNodeMemoryUsage";
/// The feature (gate) of [`decide_by_priority`], as a pod's `koordinator.sh/eviction-policy`
/// names it.
pub const BY_PRIORITY_FEATURE: &str = "MemoryEvict";
/// Strategy name of [`decide_by_priority`] in plans and audit lines.
pub const BY_PRIORITY_STRATEGY: &str = "memory_evict_by_priority";
/// Event reason of [`decide_by_priority`]'s evictions (upstream's reason for `MemoryEvict`).
pub const BY_PRIORITY_REASON: &str = "EvictPodByMemoryUsedThresholdPercent";
/// Upstream's default threshold when the NodeSLO leaves it unset.
pub const DEFAULT_THRESHOLD_PERCENT: i64 = 70;
/// Default lower bound: threshold minus this buffer.
pub const RELEASE_BUFFER_PERCENT: i64 = 2;
/// Upstream's default pause after an eviction round (`--memory-evict-cool-time-seconds`).
pub const DEFAULT_COOL_DOWN_SECONDS: f64 = 4.0;

/// Everything memory eviction looks at; times are seconds since any origin the caller keeps.
#[derive(Debug, Clone)]
pub struct MemoryEvictInput<'a> {
    /// `resourceUsedThresholdWithBE` of the NodeSLO (merged over defaults or not: unset fields
    /// take upstream's defaults here).
    pub strategy: &'a ResourceThresholdStrategy,
    /// Node memory capacity in bytes.
    pub capacity_bytes: u64,
    /// Latest node memory usage in bytes (MemTotal − MemAvailable), if measured recently.
    pub used_bytes: Option<u64>,
    /// Every pod on the node; only BE pods are ever picked.
    pub pods: &'a [EvictCandidate],
    /// Now.
    pub now_seconds: f64,
    /// When this strategy last evicted something.
    pub last_eviction_seconds: Option<f64>,
    /// Cool-down after an eviction round ([`DEFAULT_COOL_DOWN_SECONDS`]).
    pub cool_down_seconds: f64,
}

/// What memory eviction decided and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryEvictAction {
    /// `resourceUsedThresholdWithBE.enable` is not true.
    Disabled,
    /// Inputs missing or the config is invalid (see `reason`).
    Skipped,
    /// Within the cool-down after the last eviction.
    CoolingDown,
    /// Usage below the threshold.
    BelowThreshold,
    /// Over the threshold but pods already being evicted cover the release.
    CoveredInFlight,
    /// Pods picked (maybe fewer than needed when BE pods run out).
    Evict,
}

/// The decision with its numbers (the `strategies.memory_evict` object of `koordlet plan`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemoryEvictPlan {
    /// What was decided.
    pub action: MemoryEvictAction,
    /// Why a round was skipped, empty otherwise.
    pub reason: String,
    /// Node memory usage in integer percent of capacity.
    pub usage_percent: Option<i64>,
    /// Effective threshold.
    pub threshold_percent: i64,
    /// Effective lower bound.
    pub lower_percent: i64,
    /// Bytes to release: `capacity × (usage% − lower%) / 100`.
    pub release_bytes: u64,
    /// Bytes pods already being evicted will free.
    pub in_flight_bytes: u64,
    /// Bytes freed by in-flight pods plus this plan's picks.
    pub released_bytes: u64,
    /// `evictEnabledPriorityThreshold`: the highest priority [`decide_by_priority`] evicts
    /// (not shown for [`decide`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority_threshold: Option<i32>,
    /// Pods to evict, in order.
    pub evictions: Vec<EvictionPick>,
    /// Pods whose `koordinator.sh/eviction-policy` keeps them out of this strategy's picks
    /// (BE pods for [`decide`], opted-in pods for [`decide_by_priority`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub exempt: Vec<ExemptPod>,
}

/// Which pods a round picks from.
enum Victims {
    /// BE pods ([`decide`]).
    Be,
    /// Opted-in pods at or below `evictEnabledPriorityThreshold` ([`decide_by_priority`]).
    ByPriority,
}

fn memory_of(p: &EvictCandidate) -> f64 {
    p.memory_usage_bytes.unwrap_or(0) as f64
}

/// Decides BE memory eviction (`BEMemoryEvict`) for one round.
pub fn decide(input: &MemoryEvictInput<'_>) -> MemoryEvictPlan {
    decide_for(input, Victims::Be)
}

/// Decides memory eviction among the pods that opted in (`MemoryEvict`) for one round; needs
/// `evictEnabledPriorityThreshold`.
pub fn decide_by_priority(input: &MemoryEvictInput<'_>) -> MemoryEvictPlan {
    decide_for(input, Victims::ByPriority)
}

fn decide_for(input: &MemoryEvictInput<'_>, victims: Victims) -> MemoryEvictPlan {
    let s = input.strategy;
    let threshold = super::clamp_percent(
        s.memory_evict_threshold_percent
            .unwrap_or(DEFAULT_THRESHOLD_PERCENT),
    );
    let lower = s
        .memory_evict_lower_percent
        .unwrap_or(threshold - RELEASE_BUFFER_PERCENT);
    let mut plan = MemoryEvictPlan {
        action: MemoryEvictAction::Skipped,
        reason: String::new(),
        usage_percent: None,
        threshold_percent: threshold,
        lower_percent: lower,
        release_bytes: 0,
        in_flight_bytes: 0,
        released_bytes: 0,
        priority_threshold: None,
        evictions: Vec::new(),
        exempt: Vec::new(),
    };
    if s.enable != Some(true) {
        plan.action = MemoryEvictAction::Disabled;
        return plan;
    }
    if !(0..threshold).contains(&lower) {
        plan.reason = format!("memoryEvictLowerPercent {lower} must be in [0, threshold {threshold})");
        return plan;
    }
    if matches!(victims, Victims::ByPriority) {
        let Some(priority_threshold) = s.evict_enabled_priority_threshold else {
            plan.reason = "evictEnabledPriorityThreshold is not set: MemoryEvict evicts only pods \
                           at or below that priority"
                .into();
            return plan;
        };
        plan.priority_threshold = Some(priority_threshold);
    }
    let Some(used) = input.used_bytes else {
        plan.reason = "node memory usage not measured yet".into();
        return plan;
    };
    if input.capacity_bytes == 0 {
        plan.reason = "node memory capacity unknown".into();
        return plan;
    }
    let capacity = u128::from(input.capacity_bytes);
    let usage_percent = (u128::from(used) * 100 / capacity).min(i64::MAX as u128) as i64;
    plan.usage_percent = Some(usage_percent);
    if usage_percent < threshold {
        plan.action = MemoryEvictAction::BelowThreshold;
        return plan;
    }
    if cooling_down(
        input.now_seconds,
        input.last_eviction_seconds,
        input.cool_down_seconds,
    ) {
        plan.action = MemoryEvictAction::CoolingDown;
        return plan;
    }
    // usage_percent >= threshold > lower >= 0, so the factor is positive.
    let release =
        (capacity.saturating_mul((usage_percent - lower) as u128) / 100).min(u64::MAX as u128) as u64;
    plan.release_bytes = release;
    let selection = match plan.priority_threshold {
        // As upstream, a pod without a memory measurement is left out: what evicting a pod of
        // any class frees must be known. Pods on their way out still count (in flight).
        Some(priority_threshold) => select_opted_in(
            input.pods,
            priority_threshold,
            |p| p.memory_usage_bytes.is_some(),
            release as f64,
            memory_of,
            memory_of,
        ),
        None => select_victims(input.pods, release as f64, memory_of, memory_of),
    };
    plan.in_flight_bytes = selection.in_flight as u64;
    plan.released_bytes = selection.released as u64;
    plan.action = if selection.picks.is_empty() {
        MemoryEvictAction::CoveredInFlight
    } else {
        MemoryEvictAction::Evict
    };
    if let Some(why) = selection.shortfall(release as f64) {
        plan.reason = why;
    }
    let numbers = |p: &EvictCandidate| {
        format!(
            "node memory usage {usage_percent}% >= threshold {threshold}%, release {release} bytes \
             down to {lower}%; pod memory usage {} bytes",
            p.memory_usage_bytes.unwrap_or(0)
        )
    };
    plan.evictions = match victims {
        Victims::Be => selection.evictions(STRATEGY, REASON, numbers),
        Victims::ByPriority => selection.evictions(BY_PRIORITY_STRATEGY, BY_PRIORITY_REASON, |p| {
            format!(
                "{}; eviction priority {}, priority {}",
                numbers(p),
                p.eviction_priority,
                p.priority.unwrap_or(0)
            )
        }),
    };
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use koord_api::QoSClass;

    const GI: u64 = 1 << 30;

    pub(crate) fn pod(name: &str, qos: QoSClass, prio: Option<i32>, mem: Option<u64>) -> EvictCandidate {
        EvictCandidate {
            uid: format!("uid-{name}"),
            namespace: "default".into(),
            name: name.into(),
            qos,
            priority: prio,
            cpu_usage_milli: None,
            batch_cpu_request_milli: 0,
            memory_usage_bytes: mem,
            being_evicted: false,
            eviction_allowed: true,
            eviction_enabled: false,
            eviction_priority: 0,
            koordinator_priority: None,
        }
    }

    fn enabled(threshold: Option<i64>, lower: Option<i64>) -> ResourceThresholdStrategy {
        ResourceThresholdStrategy {
            enable: Some(true),
            memory_evict_threshold_percent: threshold,
            memory_evict_lower_percent: lower,
            ..Default::default()
        }
    }

    fn run(s: &ResourceThresholdStrategy, used: u64, pods: &[EvictCandidate]) -> MemoryEvictPlan {
        decide(&MemoryEvictInput {
            strategy: s,
            capacity_bytes: 100 * GI,
            used_bytes: Some(used),
            pods,
            now_seconds: 100.0,
            last_eviction_seconds: None,
            cool_down_seconds: DEFAULT_COOL_DOWN_SECONDS,
        })
    }

    fn names(plan: &MemoryEvictPlan) -> Vec<&str> {
        plan.evictions.iter().map(|e| e.name.as_str()).collect()
    }

    #[test]
    fn threshold_boundary_and_default_lower() {
        let s = enabled(None, None);
        let pods = [pod("be", QoSClass::Be, None, Some(10 * GI))];
        // 69.99 % → integer 69 < 70.
        let p = run(&s, 70 * GI - 1, &pods);
        assert_eq!(p.action, MemoryEvictAction::BelowThreshold);
        assert_eq!(p.usage_percent, Some(69));
        // Exactly 70 %: evict; lower defaults to 68, release = 100Gi × 2 / 100.
        let p = run(&s, 70 * GI, &pods);
        assert_eq!(p.action, MemoryEvictAction::Evict);
        assert_eq!((p.threshold_percent, p.lower_percent), (70, 68));
        assert_eq!(p.release_bytes, 2 * GI);
        assert_eq!(names(&p), ["be"]);
        assert_eq!(p.evictions[0].reason, "EvictPodByNodeMemoryUsage");
    }

    #[test]
    fn disabled_by_default_even_over_threshold() {
        let s = ResourceThresholdStrategy::default();
        let pods = [pod("be", QoSClass::Be, None, Some(10 * GI))];
        assert_eq!(run(&s, 99 * GI, &pods).action, MemoryEvictAction::Disabled);
    }

    #[test]
    fn order_priority_then_usage_then_zero_last() {
        let s = enabled(Some(80), Some(70));
        let pods = [
            pod("ls-huge", QoSClass::Ls, Some(0), Some(50 * GI)),
            pod("be-zero", QoSClass::Be, Some(5000), Some(0)),
            pod("be-small", QoSClass::Be, Some(5000), Some(3 * GI)),
            pod("be-big", QoSClass::Be, Some(5000), Some(6 * GI)),
            pod("be-low-prio", QoSClass::Be, Some(1000), Some(GI)),
        ];
        // 90 % → release 20 Gi: everything BE, in order, and still not covered; LS never.
        let p = run(&s, 90 * GI, &pods);
        assert_eq!(names(&p), ["be-low-prio", "be-big", "be-small", "be-zero"]);
        assert_eq!(p.release_bytes, 20 * GI);
        // 80 % → release 10 Gi: low prio (1) + big (6) + small (3) = 10 covers it.
        let p = run(&s, 80 * GI, &pods);
        assert_eq!(names(&p), ["be-low-prio", "be-big", "be-small"]);
        assert_eq!(p.released_bytes, 10 * GI);
    }

    #[test]
    fn in_flight_pods_count_and_are_not_picked_again() {
        let s = enabled(Some(70), None);
        let mut going = pod("be-going", QoSClass::Be, None, Some(3 * GI));
        going.being_evicted = true;
        let pods = [going, pod("be-other", QoSClass::Be, None, Some(GI))];
        // release 2 Gi, 3 Gi already on the way out.
        let p = run(&s, 70 * GI, &pods);
        assert_eq!(p.action, MemoryEvictAction::CoveredInFlight);
        assert!(p.evictions.is_empty());
        assert_eq!(p.in_flight_bytes, 3 * GI);
    }

    #[test]
    fn disallowed_by_eviction_policy_is_skipped() {
        let s = enabled(Some(70), None);
        let mut a = pod("be-a", QoSClass::Be, None, Some(5 * GI));
        a.eviction_allowed = false;
        let pods = [a, pod("be-b", QoSClass::Be, None, Some(GI))];
        assert_eq!(names(&run(&s, 75 * GI, &pods)), ["be-b"]);
    }

    #[test]
    fn cool_down() {
        let s = enabled(Some(70), None);
        let pods = [pod("be", QoSClass::Be, None, Some(GI))];
        let mut input = MemoryEvictInput {
            strategy: &s,
            capacity_bytes: 100 * GI,
            used_bytes: Some(90 * GI),
            pods: &pods,
            now_seconds: 103.9,
            last_eviction_seconds: Some(100.0),
            cool_down_seconds: DEFAULT_COOL_DOWN_SECONDS,
        };
        assert_eq!(decide(&input).action, MemoryEvictAction::CoolingDown);
        input.now_seconds = 104.0;
        assert_eq!(decide(&input).action, MemoryEvictAction::Evict);
    }

    /// A pod labelled `koordinator.sh/eviction-enabled=true`.
    fn opted_in(name: &str, qos: QoSClass, prio: Option<i32>, mem: u64) -> EvictCandidate {
        EvictCandidate {
            eviction_enabled: true,
            ..pod(name, qos, prio, Some(mem))
        }
    }

    fn by_priority(s: &ResourceThresholdStrategy, used: u64, pods: &[EvictCandidate]) -> MemoryEvictPlan {
        decide_by_priority(&MemoryEvictInput {
            strategy: s,
            capacity_bytes: 100 * GI,
            used_bytes: Some(used),
            pods,
            now_seconds: 100.0,
            last_eviction_seconds: None,
            cool_down_seconds: DEFAULT_COOL_DOWN_SECONDS,
        })
    }

    #[test]
    fn by_priority_needs_the_priority_threshold() {
        let pods = [opted_in("ls", QoSClass::Ls, Some(100), 10 * GI)];
        let p = by_priority(&enabled(Some(70), None), 90 * GI, &pods);
        assert_eq!(p.action, MemoryEvictAction::Skipped);
        assert!(p.reason.contains("evictEnabledPriorityThreshold"), "{}", p.reason);
        assert!(p.evictions.is_empty());
    }

    #[test]
    fn by_priority_picks_opted_in_pods_of_any_class_in_upstreams_order() {
        let s = ResourceThresholdStrategy {
            evict_enabled_priority_threshold: Some(3000),
            ..enabled(Some(80), Some(70))
        };
        let with_label = |mut p: EvictCandidate, label: i64| {
            p.koordinator_priority = Some(label);
            p
        };
        let mut first = opted_in("ls-evict-first", QoSClass::Ls, Some(2000), GI);
        first.eviction_priority = -1;
        let pods = [
            with_label(opted_in("ls-120-4000", QoSClass::Ls, Some(120), 20 * GI), 4000),
            with_label(opted_in("ls-120-2000", QoSClass::Ls, Some(120), 20 * GI), 2000),
            with_label(opted_in("ls-100-9999", QoSClass::Ls, Some(100), 10 * GI), 9999),
            with_label(opted_in("be-100-9999", QoSClass::Be, Some(100), 11 * GI), 9999),
            first,
            // Never: above the priority threshold, not opted in, no priority at all.
            opted_in("ls-high", QoSClass::Ls, Some(3001), 50 * GI),
            pod("be-not-opted-in", QoSClass::Be, Some(0), Some(50 * GI)),
            opted_in("ls-no-priority", QoSClass::Ls, None, 50 * GI),
        ];
        // 100 % → release 30 Gi: eviction priority first, then priority, label, usage.
        let p = by_priority(&s, 100 * GI, &pods);
        assert_eq!(p.action, MemoryEvictAction::Evict);
        assert_eq!(p.priority_threshold, Some(3000));
        assert_eq!(
            names(&p),
            ["ls-evict-first", "be-100-9999", "ls-100-9999", "ls-120-2000"]
        );
        assert_eq!(p.released_bytes, 42 * GI);
        assert_eq!(p.evictions[0].reason, BY_PRIORITY_REASON);
        assert_eq!(p.evictions[0].strategy, BY_PRIORITY_STRATEGY);
        assert!(
            p.evictions[0]
                .message
                .contains("eviction priority -1, priority 2000")
        );
        // Same eviction priority and priority: the lower `koordinator.sh/priority` label first.
        let p = by_priority(&s, 100 * GI, &pods[..2]);
        assert_eq!(names(&p), ["ls-120-2000", "ls-120-4000"]);
        // Nobody eligible: nothing picked, and the plan says why.
        let p = by_priority(&s, 100 * GI, &pods[5..]);
        assert_eq!(p.action, MemoryEvictAction::CoveredInFlight);
        assert_eq!(p.reason, "no pod opted in to eviction left to evict");
    }

    #[test]
    fn by_priority_leaves_out_pods_without_a_memory_measurement() {
        let s = ResourceThresholdStrategy {
            evict_enabled_priority_threshold: Some(0),
            ..enabled(Some(70), None)
        };
        let unmeasured = EvictCandidate {
            eviction_enabled: true,
            ..pod("ls-unmeasured", QoSClass::Ls, Some(0), None)
        };
        let pods = [unmeasured, opted_in("ls-measured", QoSClass::Ls, Some(0), GI)];
        // release 20 Gi: the measured pod goes, the unmeasured one is never picked.
        assert_eq!(names(&by_priority(&s, 90 * GI, &pods)), ["ls-measured"]);
    }

    #[test]
    fn by_priority_counts_pods_already_leaving_whatever_their_class() {
        let s = ResourceThresholdStrategy {
            evict_enabled_priority_threshold: Some(0),
            ..enabled(Some(70), None)
        };
        // What BEMemoryEvict picked this round (not opted in) is on its way out.
        let mut leaving = pod("be-picked", QoSClass::Be, Some(0), Some(3 * GI));
        leaving.being_evicted = true;
        let pods = [leaving, opted_in("ls", QoSClass::Ls, Some(0), GI)];
        // release 2 Gi, 3 Gi already leaving.
        let p = by_priority(&s, 70 * GI, &pods);
        assert_eq!(p.action, MemoryEvictAction::CoveredInFlight);
        assert_eq!(p.in_flight_bytes, 3 * GI);
        // The BE strategy's plan carries no priority threshold.
        assert_eq!(run(&s, 70 * GI, &pods).priority_threshold, None);
    }

    #[test]
    fn bad_config_and_missing_inputs_skip() {
        let pods = [pod("be", QoSClass::Be, None, Some(GI))];
        let p = run(&enabled(Some(70), Some(70)), 90 * GI, &pods);
        assert_eq!(p.action, MemoryEvictAction::Skipped);
        assert!(p.reason.contains("memoryEvictLowerPercent"));
        let s = enabled(None, None);
        let mut input = MemoryEvictInput {
            strategy: &s,
            capacity_bytes: 0,
            used_bytes: Some(GI),
            pods: &pods,
            now_seconds: 0.0,
            last_eviction_seconds: None,
            cool_down_seconds: 4.0,
        };
        assert_eq!(decide(&input).action, MemoryEvictAction::Skipped);
        input.capacity_bytes = GI;
        input.used_bytes = None;
        assert_eq!(decide(&input).action, MemoryEvictAction::Skipped);
    }
}
