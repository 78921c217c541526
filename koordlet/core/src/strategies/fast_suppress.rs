//! The fast path of CPU suppress: a few node-level counters read every tick (50 ms by default)
//! turned into the [`super::cpu_suppress`] budget, so an LS spike shrinks the besteffort quota
//! within one or two ticks instead of upstream's 1-2 s.
//!
//! Three counters are needed: node busy time (`/proc/stat`), the `kubepods` cgroup's CPU time
//! and the `besteffort` cgroup's CPU time, plus the CPU time of the non-BE host applications
//! outside `kubepods` when the NodeSLO names any. Over one tick they give
//!
//! ```text
//! host-app usage = Σ host apps          non-BE usage = kubepods − besteffort + host-app
//! system usage   = node − kubepods − host-app
//! ```
//!
//! which are exactly the inputs of [`cpu_suppress::budget`]. Smoothing is asymmetric: the
//! non-BE usage used is `max(last tick, EWMA)`, so a spike counts at once and its end is
//! forgotten gradually; the system share (coarse `/proc/stat` ticks, slow-moving daemons) is an
//! EWMA only.
//!
//! Policy `cpuset` decides the CPU count here; [`FastSuppress::full_plan`] then runs the full
//! [`cpu_suppress::decide`] on the fast usage (topology-aware selection, safe write order, the
//! restore of what the policy does not use).
//!
//! The quota rules are [`cpu_suppress::quota_decision`]'s (floor, skip tiny changes, bounded
//! ramp-up, immediate decrease); this module adds one thing the fast cadence needs: decreases
//! are applied on the tick they are decided, increases at most once per
//! [`FastSuppressConfig::increase_interval`] (upstream's 1 s round), so the ramp-up speed is
//! upstream's and LS noise does not make the quota flap 20 times a second.
//!
//! Everything here is plain data in, plain data out; no allocation per tick.

use std::time::Duration;

use koord_api::nodeslo::{CpuSuppressPolicy, ResourceThresholdStrategy};
use serde::Serialize;

use super::cpu_suppress::{
    self, BeCgroups, Budget, CpuPools, CpuUsage, QuotaDecision, SuppressInput, SuppressPlan,
};

/// Default tick of the fast loop.
pub const DEFAULT_TICK: Duration = Duration::from_millis(50);

/// Tunables of the fast path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FastSuppressConfig {
    /// Time constant with which a past non-BE spike is forgotten.
    pub non_be_decay: Duration,
    /// Time constant of the system-usage average.
    pub system_decay: Duration,
    /// Least time between two quota increases (decreases are never delayed).
    pub increase_interval: Duration,
}

impl Default for FastSuppressConfig {
    fn default() -> Self {
        Self {
            non_be_decay: Duration::from_millis(500),
            system_decay: Duration::from_secs(2),
            increase_interval: Duration::from_secs(1),
        }
    }
}

/// One reading of the cumulative counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CounterSample {
    /// Monotonic time of the reading (any fixed origin).
    pub at: Duration,
    /// Node busy CPU time (ns).
    pub node_busy_ns: u64,
    /// CPU time of the `kubepods` cgroup (ns).
    pub kubepods_ns: u64,
    /// CPU time of the `besteffort` cgroup (ns).
    pub be_ns: u64,
    /// Σ CPU time of the non-BE host applications outside `kubepods` (ns; 0 without any).
    pub host_ns: u64,
}

/// Node CPU figures from the Node object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct NodeCpu {
    /// Capacity in milli-cores.
    pub capacity_milli: i64,
    /// `max(capacity − allocatable, reservation annotation)` in milli-cores.
    pub reserved_milli: i64,
}

/// Usage over the last tick and the smoothed values the budget uses (milli-cores).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct FastUsage {
    /// Node busy over the last tick.
    pub node_milli: i64,
    /// BE usage over the last tick.
    pub be_milli: i64,
    /// Non-BE pod usage over the last tick.
    pub non_be_last_milli: i64,
    /// Non-BE pod usage fed to the budget: `max(last, EWMA)`.
    pub non_be_milli: i64,
    /// Non-BE host applications outside `kubepods` over the last tick (part of the non-BE
    /// usage above, not of the system share).
    pub host_app_milli: i64,
    /// System usage fed to the budget (EWMA of node − kubepods).
    pub system_milli: i64,
}

/// The besteffort cpuset now and what BE may ever have (policy `cpuset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpusetSize {
    /// CPUs in the besteffort `cpuset.cpus` now.
    pub current: usize,
    /// CPUs BE may ever use (all minus LSE, reserved, exclusive SYSTEM).
    pub available: usize,
    /// Smallest BE cpuset ([`CpuPools::min_cpus`]).
    pub min: usize,
}

/// What the fast loop needs besides its counters, kept up to date by the slower QoS round
/// (which has the pod list, the NodeSLO and the topology): for policy `cpuset` the BE cgroup
/// dirs (besteffort, BE pods, their containers; current values are read by the loop when it
/// writes) and the CPU pools (topology, reserved, LSE, LSR, exclusive SYSTEM CPUs); for the
/// budget the cgroups of the non-BE host applications outside `kubepods`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CpusetScope {
    /// The besteffort tree (dirs).
    pub be: BeCgroups,
    /// CPU topology and owners.
    pub pools: CpuPools,
    /// Cgroup dirs of the NodeSLO's host applications outside `kubepods` (all non-BE: a BE
    /// host application lives under besteffort). Their CPU time is non-BE host-application
    /// usage, not system usage.
    pub host_apps: Vec<String>,
}

/// What the caller should do after a tick.
#[derive(Debug, Clone, PartialEq)]
pub enum FastAction {
    /// Nothing (warming up, value unchanged, change too small, or increase not due yet).
    Idle,
    /// Write this besteffort CFS quota.
    SetQuota {
        /// The decision core's verdict.
        decision: QuotaDecision,
        /// The quota to write (µs per 100 ms).
        quota_us: i64,
        /// The budget with its inputs.
        budget: Budget,
        /// The usage figures behind it.
        usage: FastUsage,
    },
    /// Policy `cpuset`: BE needs this many CPUs and has a different count; the caller runs the
    /// full [`cpu_suppress::decide`] (topology-aware selection, safe write order).
    ResizeCpuset {
        /// CPUs the budget asks for.
        wanted_cpus: usize,
        /// The budget with its inputs.
        budget: Budget,
        /// The usage figures behind it.
        usage: FastUsage,
    },
    /// Suppress is off (gate, NodeSLO, no NodeSLO): give BE back an unlimited quota and its full
    /// cpuset, once per transition.
    Restore,
}

/// Per-node state of the fast path.
#[derive(Debug, Clone)]
pub struct FastSuppress {
    config: FastSuppressConfig,
    last: Option<CounterSample>,
    non_be_ewma: f64,
    system_ewma: f64,
    warm: bool,
    restored: bool,
    last_increase: Option<Duration>,
    usage: FastUsage,
    last_budget: Option<i64>,
    no_cgroups: BeCgroups,
    no_cpus: CpuPools,
}

impl FastSuppress {
    /// A fresh state (the first tick only takes the baseline).
    pub fn new(config: FastSuppressConfig) -> Self {
        Self {
            config,
            last: None,
            non_be_ewma: 0.0,
            system_ewma: 0.0,
            warm: false,
            restored: false,
            last_increase: None,
            usage: FastUsage::default(),
            last_budget: None,
            no_cgroups: BeCgroups::default(),
            no_cpus: CpuPools::default(),
        }
    }

    /// The usage figures of the last tick.
    pub fn usage(&self) -> FastUsage {
        self.usage
    }

    /// The BE budget (milli-cores) computed on the last tick; `None` while suppress is off or
    /// before the first usage (exported as a gauge every tick).
    pub fn budget_milli(&self) -> Option<i64> {
        self.last_budget
    }

    /// Forgets the last reading: the next one only takes a baseline (the set of counters behind
    /// a sample changed, e.g. a host application was added).
    pub fn rebase(&mut self) {
        self.last = None;
    }

    /// Folds one counter reading into the smoothed usage. Returns false when no usage could be
    /// derived (first reading, clock not advanced, a counter went backwards: cgroup recreated).
    pub fn observe(&mut self, sample: CounterSample) -> bool {
        let Some(prev) = self.last.replace(sample) else {
            return false;
        };
        let dt = sample.at.saturating_sub(prev.at);
        if dt.is_zero()
            || sample.node_busy_ns < prev.node_busy_ns
            || sample.kubepods_ns < prev.kubepods_ns
            || sample.be_ns < prev.be_ns
            || sample.host_ns < prev.host_ns
        {
            return false;
        }
        let dt_ns = dt.as_nanos() as f64;
        let milli = |later: u64, earlier: u64| (later - earlier) as f64 * 1000.0 / dt_ns;
        let node = milli(sample.node_busy_ns, prev.node_busy_ns);
        let kubepods = milli(sample.kubepods_ns, prev.kubepods_ns);
        let be = milli(sample.be_ns, prev.be_ns).min(kubepods);
        let host = milli(sample.host_ns, prev.host_ns).min((node - kubepods).max(0.0));
        let non_be = kubepods - be + host;
        let system = (node - kubepods - host).max(0.0);
        if self.warm {
            let alpha = |tau: Duration| 1.0 - (-dt.as_secs_f64() / tau.as_secs_f64().max(1e-3)).exp();
            self.non_be_ewma += alpha(self.config.non_be_decay) * (non_be - self.non_be_ewma);
            self.system_ewma += alpha(self.config.system_decay) * (system - self.system_ewma);
        } else {
            self.non_be_ewma = non_be;
            self.system_ewma = system;
            self.warm = true;
        }
        self.usage = FastUsage {
            node_milli: node.round() as i64,
            be_milli: be.round() as i64,
            non_be_last_milli: non_be.round() as i64,
            non_be_milli: non_be.max(self.non_be_ewma).round() as i64,
            host_app_milli: host.round() as i64,
            system_milli: self.system_ewma.round() as i64,
        };
        true
    }

    /// The budget from the current smoothed usage.
    pub fn budget(&self, strategy: &ResourceThresholdStrategy, node: NodeCpu) -> Budget {
        self.with_input(
            strategy,
            node,
            &self.no_cgroups,
            &self.no_cpus,
            cpu_suppress::budget,
        )
    }

    /// The full [`cpu_suppress::decide`] on the current smoothed usage with the BE tree's
    /// current values `be` and the CPU pools: the topology-aware cpuset selection and its
    /// writes in safe order, plus the restore of whatever the policy does not use (quota −1
    /// under `cpuset`, the full BE cpuset under `cfsQuota`). `strategy` `None` (suppress off)
    /// gives the restore of both.
    pub fn full_plan(
        &self,
        strategy: Option<&ResourceThresholdStrategy>,
        node: NodeCpu,
        be: &BeCgroups,
        pools: &CpuPools,
    ) -> SuppressPlan {
        let off = ResourceThresholdStrategy::default();
        let strategy = strategy.filter(|s| s.enable == Some(true)).unwrap_or(&off);
        self.with_input(strategy, node, be, pools, cpu_suppress::decide)
    }

    fn with_input<T>(
        &self,
        strategy: &ResourceThresholdStrategy,
        node: NodeCpu,
        cgroups: &BeCgroups,
        cpus: &CpuPools,
        f: impl FnOnce(&SuppressInput<'_>) -> T,
    ) -> T {
        let u = self.usage;
        // The smoothed non-BE usage holds the host applications' share: report it apart.
        let host = u.host_app_milli.clamp(0, u.non_be_milli.max(0));
        let pods = [CpuUsage {
            be: false,
            usage_milli: u.non_be_milli - host,
        }];
        let host_apps = [CpuUsage {
            be: false,
            usage_milli: host,
        }];
        f(&SuppressInput {
            strategy,
            capacity_milli: node.capacity_milli,
            reserved_milli: node.reserved_milli,
            // BE is left out of both the node and the pods: `budget` then sees exactly the
            // smoothed system share as `node − Σ pods − Σ host apps`.
            node_usage_milli: u.non_be_milli.saturating_add(u.system_milli),
            pods: &pods,
            host_apps: &host_apps,
            cgroups,
            cpus,
        })
    }

    /// One tick: folds `sample` in and decides. `strategy` is `None` when suppress is off (gate
    /// off, no NodeSLO, `enable` not true). `current_quota_us` is the besteffort quota now
    /// (`None`: unknown); `cpus` the besteffort cpuset size (policy `cpuset` only).
    pub fn tick(
        &mut self,
        sample: CounterSample,
        strategy: Option<&ResourceThresholdStrategy>,
        node: NodeCpu,
        current_quota_us: Option<i64>,
        cpus: Option<CpusetSize>,
    ) -> FastAction {
        let fresh = self.observe(sample);
        let Some(strategy) = strategy.filter(|s| s.enable == Some(true)) else {
            self.last_increase = None;
            self.last_budget = None;
            if self.restored {
                return FastAction::Idle;
            }
            self.restored = true;
            return FastAction::Restore;
        };
        self.restored = false;
        if !fresh || node.capacity_milli <= 0 {
            return FastAction::Idle;
        }
        let budget = self.budget(strategy, node);
        self.last_budget = Some(budget.budget_milli);
        let usage = self.usage;
        match strategy.cpu_suppress_policy.unwrap_or(CpuSuppressPolicy::Cpuset) {
            CpuSuppressPolicy::CfsQuota => {
                let decision = cpu_suppress::quota_decision(&budget, current_quota_us);
                let Some(quota_us) = decision.written_us else {
                    return FastAction::Idle;
                };
                let increase = match current_quota_us {
                    Some(cur) => cur < 0 || quota_us > cur,
                    None => false,
                };
                if increase {
                    if let Some(t) = self.last_increase
                        && sample.at.saturating_sub(t) < self.config.increase_interval
                    {
                        return FastAction::Idle;
                    }
                    self.last_increase = Some(sample.at);
                }
                FastAction::SetQuota {
                    decision,
                    quota_us,
                    budget,
                    usage,
                }
            }
            CpuSuppressPolicy::Cpuset => {
                let min = cpus.map_or(cpu_suppress::MIN_BE_CPUS, |c| c.min);
                let wanted = cpu_suppress::wanted_cpus(&budget, min);
                let reachable = cpus.map_or(wanted, |c| wanted.min(c.available.max(1)));
                match cpus.map(|c| c.current) {
                    Some(n) if n == reachable => FastAction::Idle,
                    Some(n) if n < reachable => {
                        if let Some(t) = self.last_increase
                            && sample.at.saturating_sub(t) < self.config.increase_interval
                        {
                            return FastAction::Idle;
                        }
                        self.last_increase = Some(sample.at);
                        FastAction::ResizeCpuset {
                            wanted_cpus: wanted,
                            budget,
                            usage,
                        }
                    }
                    _ => FastAction::ResizeCpuset {
                        wanted_cpus: wanted,
                        budget,
                        usage,
                    },
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "fast_suppress_tests.rs"]
mod tests;
