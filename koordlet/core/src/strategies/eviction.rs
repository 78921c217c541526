//! What the eviction strategies share: the candidate pods, the picks, and the rules that keep
//! eviction safe (only BE pods, or pods that opted in for the node-level strategies; never a pod
//! already being evicted; pods in flight count as released).

use std::collections::BTreeSet;

use koord_api::QoSClass;
use serde::Serialize;

/// The pod annotation that names the koordlet features allowed to evict the pod.
pub const ANNOTATION_EVICTION_POLICY: &str = "koordinator.sh/eviction-policy";

/// What a pod's `koordinator.sh/eviction-policy` annotation says (upstream's semantics): a JSON
/// list of feature-gate names (`["BECPUEvict","BEMemoryEvict"]`) that may evict the pod. No
/// annotation: every feature may. An annotation that is not a JSON list of strings: none may
/// (the safe reading of a typo; the plan lists the pod with the parse error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EvictionPolicy {
    /// No annotation: no restriction.
    Unrestricted,
    /// Only these features (an empty list protects the pod from every eviction).
    Features(BTreeSet<String>),
    /// The annotation does not parse; no feature may evict the pod.
    Invalid(String),
}

impl EvictionPolicy {
    /// Reads the annotation's value (`None` when the pod has none).
    pub fn parse(annotation: Option<&str>) -> EvictionPolicy {
        let Some(text) = annotation else {
            return EvictionPolicy::Unrestricted;
        };
        match serde_json::from_str::<Vec<String>>(text) {
            Ok(features) => {
                EvictionPolicy::Features(features.into_iter().map(|f| f.trim().to_owned()).collect())
            }
            Err(e) => EvictionPolicy::Invalid(e.to_string()),
        }
    }

    /// Whether the feature named `feature` (a gate name such as `BECPUEvict`) may evict the pod.
    pub fn allows(&self, feature: &str) -> bool {
        match self {
            EvictionPolicy::Unrestricted => true,
            EvictionPolicy::Features(f) => f.contains(feature),
            EvictionPolicy::Invalid(_) => false,
        }
    }

    /// Why `feature` may not evict the pod (`None` when it may): what the plan prints.
    pub fn refusal(&self, feature: &str) -> Option<String> {
        match self {
            _ if self.allows(feature) => None,
            EvictionPolicy::Features(f) => Some(format!(
                "{ANNOTATION_EVICTION_POLICY} allows only [{}]",
                f.iter().cloned().collect::<Vec<_>>().join(",")
            )),
            EvictionPolicy::Invalid(e) => Some(format!(
                "{ANNOTATION_EVICTION_POLICY} is not a JSON list of feature names ({e}): no feature may evict the pod"
            )),
            EvictionPolicy::Unrestricted => None,
        }
    }
}

/// A BE pod the eviction policy keeps out of a strategy's picks, with why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExemptPod {
    /// `namespace/name`.
    pub pod: String,
    /// What the annotation says.
    pub reason: String,
}

/// One pod on the node as eviction sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct EvictCandidate {
    /// Pod UID (the Eviction API precondition).
    pub uid: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Resolved Koordinator QoS class; only [`QoSClass::Be`] is ever picked.
    pub qos: QoSClass,
    /// `spec.priority`, when set.
    pub priority: Option<i32>,
    /// Latest CPU usage in milli-cores, when measured.
    pub cpu_usage_milli: Option<f64>,
    /// Σ container `kubernetes.io/batch-cpu` requests in milli-cores (what evicting frees).
    pub batch_cpu_request_milli: i64,
    /// Latest memory usage in bytes, when measured.
    pub memory_usage_bytes: Option<u64>,
    /// An eviction was already requested for this pod (it counts as pending release and is
    /// never picked again).
    pub being_evicted: bool,
    /// The pod's `koordinator.sh/eviction-policy` allows this strategy to evict it.
    pub eviction_allowed: bool,
    /// Labelled `koordinator.sh/eviction-enabled=true`: the node-level strategies
    /// (`MemoryEvict`) may pick it whatever its QoS class.
    pub eviction_enabled: bool,
    /// `koordinator.sh/eviction-priority` (lower is evicted first; absent or unreadable: 0).
    pub eviction_priority: i64,
    /// The `koordinator.sh/priority` label, when it holds a number.
    pub koordinator_priority: Option<i64>,
}

impl EvictCandidate {
    /// Whether a BE strategy may pick this pod: BE, allowed, not already on its way out.
    pub fn pickable(&self) -> bool {
        self.qos == QoSClass::Be && self.eviction_allowed && !self.being_evicted
    }

    /// Whether a node-level strategy may pick this pod: any QoS class, labelled
    /// `koordinator.sh/eviction-enabled=true`, with a `spec.priority` at most
    /// `priority_threshold` (a pod without one is never picked, as upstream), allowed, not
    /// already on its way out.
    pub fn opted_in(&self, priority_threshold: i32) -> bool {
        self.eviction_enabled
            && self.priority.is_some_and(|p| p <= priority_threshold)
            && self.eviction_allowed
            && !self.being_evicted
    }
}

/// A pod the plan evicts, with the numbers that caused it (they go into the Event).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EvictionPick {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID (precondition of the Eviction API call).
    pub uid: String,
    /// `cpu_evict` or `memory_evict`.
    pub strategy: &'static str,
    /// Event reason: `EvictPodByBECPUSatisfaction` or `EvictPodByNodeMemoryUsage`.
    pub reason: &'static str,
    /// Human-readable numbers: what was measured, what must be released, what this pod frees.
    pub message: String,
}

/// The victims of one eviction round and what they add up to.
pub(crate) struct Selection<'a> {
    /// Picked pods, best victim first.
    pub picks: Vec<&'a EvictCandidate>,
    /// What pods already being evicted free.
    pub in_flight: f64,
    /// In-flight plus the picks.
    pub released: f64,
    /// The pods the strategy picks from, for messages.
    pub pool: &'static str,
}

impl Selection<'_> {
    /// Why nothing was picked although what pods in flight free does not cover `target`.
    pub fn shortfall(&self, target: f64) -> Option<String> {
        (self.picks.is_empty() && self.in_flight < target).then(|| format!("no {} left to evict", self.pool))
    }

    /// The picks as plan entries of `strategy` with the Event `reason`; `message` gives each
    /// pick's numbers.
    pub fn evictions(
        &self,
        strategy: &'static str,
        reason: &'static str,
        message: impl Fn(&EvictCandidate) -> String,
    ) -> Vec<EvictionPick> {
        self.picks
            .iter()
            .map(|p| EvictionPick {
                namespace: p.namespace.clone(),
                name: p.name.clone(),
                uid: p.uid.clone(),
                strategy,
                reason,
                message: message(p),
            })
            .collect()
    }
}

/// The victim selection both eviction strategies share: BE pods that may be picked, ordered by
/// priority ascending, then `busiest` descending, then identity; picked until what they `free`
/// (plus what pods in flight free) covers `target`.
pub(crate) fn select_victims<'a>(
    pods: &'a [EvictCandidate],
    target: f64,
    frees: impl Fn(&EvictCandidate) -> f64,
    busiest: impl Fn(&EvictCandidate) -> f64,
) -> Selection<'a> {
    let in_flight = in_flight_release(pods.iter().filter(|p| p.qos == QoSClass::Be), &frees);
    let mut ordered: Vec<&EvictCandidate> = pods.iter().filter(|p| p.pickable()).collect();
    ordered.sort_by(|a, b| {
        by_priority(a, b)
            .then_with(|| busiest(b).total_cmp(&busiest(a)))
            .then_with(|| by_identity(a, b))
    });
    let (picks, released) = pick_until_covered(ordered, in_flight, target, &frees);
    Selection {
        picks,
        in_flight,
        released,
        pool: "BE pod",
    }
}

/// The victim selection of the node-level strategies (upstream's `MemoryEvict` order): pods
/// that opted in ([`EvictCandidate::opted_in`]) and pass `eligible`, ordered by `koordinator.sh/eviction-priority`
/// ascending, `spec.priority` ascending, the `koordinator.sh/priority` label ascending (absent:
/// the pod's priority), `busiest` descending, then identity; picked until what they `free`
/// (plus what every pod already being evicted frees) covers `target`.
pub(crate) fn select_opted_in<'a>(
    pods: &'a [EvictCandidate],
    priority_threshold: i32,
    eligible: impl Fn(&EvictCandidate) -> bool,
    target: f64,
    frees: impl Fn(&EvictCandidate) -> f64,
    busiest: impl Fn(&EvictCandidate) -> f64,
) -> Selection<'a> {
    let in_flight = in_flight_release(pods.iter(), &frees);
    let mut ordered: Vec<&EvictCandidate> = pods
        .iter()
        .filter(|p| p.opted_in(priority_threshold) && eligible(p))
        .collect();
    let label_priority = |p: &EvictCandidate| {
        p.koordinator_priority
            .unwrap_or_else(|| i64::from(p.priority.unwrap_or(0)))
    };
    ordered.sort_by(|a, b| {
        a.eviction_priority
            .cmp(&b.eviction_priority)
            .then_with(|| by_priority(a, b))
            .then_with(|| label_priority(a).cmp(&label_priority(b)))
            .then_with(|| busiest(b).total_cmp(&busiest(a)))
            .then_with(|| by_identity(a, b))
    });
    let (picks, released) = pick_until_covered(ordered, in_flight, target, &frees);
    Selection {
        picks,
        in_flight,
        released,
        pool: "pod opted in to eviction",
    }
}

/// Walks `ordered` candidates (best victim first, all eligible) until `released` (starting
/// from what pods in flight already free) covers `target`.
/// Returns the picks and the total released including pods in flight.
fn pick_until_covered<'a>(
    ordered: impl IntoIterator<Item = &'a EvictCandidate>,
    in_flight: f64,
    target: f64,
    frees: impl Fn(&EvictCandidate) -> f64,
) -> (Vec<&'a EvictCandidate>, f64) {
    let mut released = in_flight;
    let mut picks = Vec::new();
    for pod in ordered {
        if released >= target {
            break;
        }
        released += frees(pod).max(0.0);
        picks.push(pod);
    }
    (picks, released)
}

/// What the `pods` already being evicted will free, by `frees`: counted so a slow eviction does
/// not make the next round pick more pods.
fn in_flight_release<'a>(
    pods: impl Iterator<Item = &'a EvictCandidate>,
    frees: impl Fn(&EvictCandidate) -> f64,
) -> f64 {
    pods.filter(|p| p.being_evicted).map(|p| frees(p).max(0.0)).sum()
}

/// Whether the cool-down after the last eviction still runs at `now` (all in seconds since the
/// caller's origin).
pub(crate) fn cooling_down(now_s: f64, last_eviction_s: Option<f64>, cool_down_s: f64) -> bool {
    match last_eviction_s {
        Some(last) => now_s - last < cool_down_s,
        None => false,
    }
}

/// Orders by `spec.priority` ascending (lower priority is evicted first); a pod without a
/// priority counts as 0, the API server's default, so the order is total (upstream compares
/// only when both are set, which is not a total order).
fn by_priority(a: &EvictCandidate, b: &EvictCandidate) -> std::cmp::Ordering {
    a.priority.unwrap_or(0).cmp(&b.priority.unwrap_or(0))
}

/// Last tie-breaker so the victim order is deterministic: namespace/name descending (upstream's
/// memory tie-breaker), then UID.
fn by_identity(a: &EvictCandidate, b: &EvictCandidate) -> std::cmp::Ordering {
    (&b.namespace, &b.name, &b.uid).cmp(&(&a.namespace, &a.name, &a.uid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eviction_policy_reads_upstreams_annotation() {
        // (annotation, allows BECPUEvict, allows BEMemoryEvict)
        let cases = [
            (None, true, true),
            (Some(r#"["BECPUEvict"]"#), true, false),
            (Some(r#"["BEMemoryEvict","MemoryEvict"]"#), false, true),
            (Some(r#"["BECPUEvict","BEMemoryEvict"]"#), true, true),
            (Some(r#"[" BEMemoryEvict "]"#), false, true),
            (Some("[]"), false, false),
            (Some(""), false, false),
            (Some("BECPUEvict"), false, false),
            (Some(r#"{"BECPUEvict":true}"#), false, false),
            (Some("[1, 2]"), false, false),
            (Some(r#"["becpuevict"]"#), false, false),
        ];
        for (annotation, cpu, memory) in cases {
            let policy = EvictionPolicy::parse(annotation);
            assert_eq!(policy.allows("BECPUEvict"), cpu, "{annotation:?}");
            assert_eq!(policy.allows("BEMemoryEvict"), memory, "{annotation:?}");
            assert_eq!(policy.refusal("BECPUEvict").is_none(), cpu, "{annotation:?}");
        }
        assert!(matches!(
            EvictionPolicy::parse(Some("nope")),
            EvictionPolicy::Invalid(_)
        ));
        let why = EvictionPolicy::parse(Some(r#"["BECPUEvict"]"#))
            .refusal("BEMemoryEvict")
            .unwrap();
        assert_eq!(why, "koordinator.sh/eviction-policy allows only [BECPUEvict]");
    }
}
