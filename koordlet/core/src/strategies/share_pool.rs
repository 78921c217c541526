//! The share pool: CPUs not bound to LSE/LSR pods, where LS pods (and their bursts) run. How
//! busy it is decides whether CPU burst may grow CFS quotas.

use serde::Serialize;

/// The share pool is "cooling" (no scale-up) above this fraction of the threshold.
pub const COOLING_FRACTION: f64 = 0.9;

/// The share pool (CPUs not bound to LSE/LSR pods) and its usage, averaged over
/// `min(5 × reconcile interval, 10 s)`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SharePool {
    /// Logical CPUs of the node.
    pub processors: usize,
    /// Σ CPU requests of LSE and LSR pods, milli.
    pub lse_lsr_request_milli: i64,
    /// Node CPU usage, milli (`None`: unknown).
    pub node_usage_milli: Option<f64>,
    /// Σ usage of LSE, LSR and BE pods, milli (`None`: unknown).
    pub lse_lsr_be_usage_milli: Option<f64>,
}

/// How busy the share pool is; decides whether quotas may grow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeState {
    /// Usage ≥ threshold: scale quotas down.
    Overload,
    /// Usage ≥ 90 % of the threshold: hold.
    Cooling,
    /// Room to grow.
    Idle,
    /// Missing data: no scale-up, scale-down still allowed.
    Unknown,
}

/// Share-pool state from its usage and `sharePoolThresholdPercent`; also returns the ratio.
pub fn node_state(pool: &SharePool, threshold_percent: i64) -> (NodeState, Option<f64>) {
    let (Some(node), Some(bound)) = (pool.node_usage_milli, pool.lse_lsr_be_usage_milli) else {
        return (NodeState::Unknown, None);
    };
    if pool.processors == 0 || !node.is_finite() || !bound.is_finite() {
        return (NodeState::Unknown, None);
    }
    let total = (pool.processors as f64) * 1000.0 - pool.lse_lsr_request_milli as f64;
    let ratio = if total <= 0.0 { 1.0 } else { (node - bound) / total };
    let threshold = threshold_percent as f64 / 100.0;
    let state = if ratio >= threshold {
        NodeState::Overload
    } else if ratio >= COOLING_FRACTION * threshold {
        NodeState::Cooling
    } else {
        NodeState::Idle
    };
    (state, Some(ratio))
}
