//! The live fast loop of CPU suppress: every tick (`--suppress-interval`, 50 ms) it reads three
//! counters through kept-open file descriptors (`pread` at offset 0 into a fixed buffer: no
//! open, no allocation per tick), lets [`FastSuppress`] decide, and writes the besteffort CFS
//! quota through the [`Executor`] only when the decision changes it.
//!
//! Counters: node busy time (`/proc/stat` first line, or a cgroup's CPU time standing for the
//! node), the `kubepods` cgroup's and the `besteffort` cgroup's CPU time (`cpuacct.usage` on
//! v1, `cpu.stat` `usage_usec` on v2). The current quota is read the same way
//! (`cpu.cfs_quota_us` / `cpu.max`); in dry-run the last decided value stands for it, so a
//! dry run logs each change once.
//!
//! Policy `cpuset`: the slower QoS round publishes a [`CpusetScope`] (BE cgroup dirs, CPU
//! topology, reserved/LSE/LSR/SYSTEM pools) whenever it changes; the loop reads the besteffort
//! `cpuset.cpus` size each tick (one more kept-open file) and, when the budget asks for a
//! different CPU count, runs the full [`cpu_suppress::decide`](koordlet_core::strategies::cpu_suppress::decide)
//! on its fast usage with that scope (whole cores first, NUMA-aware, never LSE or reserved CPUs)
//! and applies the writes through the executor, which orders them safely between parents and
//! children. On a policy change (or a new BE pod under `cpuset`) the full plan runs once more,
//! which also restores what the policy does not use: quota −1 under `cpuset`, the full BE
//! cpuset under `cfsQuota`, both when suppress is off.

use koord_api::KubeQoSClass;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use koord_api::nodeslo::ResourceThresholdStrategy;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::executor::{ApplyReport, CgroupWrite, Executor, ExecutorConfig};
use crate::states::Snapshot;
use crate::system::proc_stat::USER_HZ;
use crate::system::{
    CgroupDir, CgroupResource, CgroupValue, CgroupVersion, Cgroups, ParseError, SystemError,
};
use koordlet_core::features::FeatureGates;
use koordlet_core::strategies::CFS_PERIOD_US;
use koordlet_core::strategies::cpu_suppress::STRATEGY;
use koordlet_core::strategies::cpuset::CpuList;
use koordlet_core::strategies::fast_step::{FastWrite, PlanReport, PlanWrite, fast_write};
use koordlet_core::strategies::fast_suppress::{
    CounterSample, CpusetScope, CpusetSize, FastSuppress, FastSuppressConfig, NodeCpu,
};
use koordlet_core::strategies::settle::{Settle, SuppressMode};

mod counters;
mod metrics;
mod node_cpu;
mod tick_log;

use counters::{CounterFile, CounterKind};
pub use metrics::SuppressMetrics;
pub use node_cpu::node_cpu;
use tick_log::{Observation, log_action};

/// Where the node's busy time comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeCounter {
    /// `/proc/stat`, first line (upstream's source; 10 ms resolution).
    ProcStat(PathBuf),
    /// The CPU time of this cgroup (ns resolution): the root, or a test tree's top.
    Cgroup(CgroupDir),
}

/// Settings of the fast loop.
#[derive(Debug, Clone)]
pub struct SuppressLoopConfig {
    /// Time between two ticks.
    pub interval: Duration,
    /// Decide and log, write nothing.
    pub dry_run: bool,
    /// Smoothing and pacing.
    pub fast: FastSuppressConfig,
    /// Node busy-time source.
    pub node_counter: NodeCounter,
    /// The `kubepods` cgroup.
    pub kubepods: CgroupDir,
    /// The `besteffort` QoS cgroup.
    pub besteffort: CgroupDir,
}

/// What one tick did (for tests and the benchmark).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TickOutcome {
    /// Nothing written.
    Idle,
    /// The besteffort quota was written (or logged, in dry-run) with this value.
    Wrote(i64),
    /// Policy `cpuset`: the BE cpusets were written (or logged) with this many CPUs at the
    /// besteffort level.
    WroteCpuset(usize),
    /// Counters could not be read this tick.
    ReadFailed,
}

/// What BE pods are allowed after a tick, in milli-cores, as upstream's
/// `koordlet_be_suppress_cpu_cores` reports it: the besteffort quota in force (policy
/// `cfsQuota`) or the CPUs of the besteffort cpuset (policy `cpuset`). None while suppress is
/// off, the quota is unlimited or the value unknown.
fn allowed_milli(mode: SuppressMode, outcome: TickOutcome, seen: &Observation) -> Option<i64> {
    match mode {
        SuppressMode::Quota => {
            let quota = match outcome {
                TickOutcome::Wrote(quota) => Some(quota),
                _ => seen.current_quota_us,
            };
            quota
                .filter(|q| *q > 0)
                .map(|q| q.saturating_mul(1000) / CFS_PERIOD_US)
        }
        SuppressMode::Cpuset => {
            let cpus = match outcome {
                TickOutcome::WroteCpuset(n) => Some(n),
                _ => seen.cpus.map(|c| c.current),
            };
            cpus.and_then(|n| i64::try_from(n).ok())
                .map(|n| n.saturating_mul(1000))
        }
        SuppressMode::Off => None,
    }
}

/// The live loop's state: open counters, the decision state, the executor.
pub struct SuppressLoop {
    config: SuppressLoopConfig,
    fast: FastSuppress,
    executor: Executor,
    node: CounterFile,
    kubepods: CounterFile,
    be: CounterFile,
    quota: CounterFile,
    be_cpuset: CounterFile,
    host_apps: Vec<(String, CounterFile)>,
    buf: [u8; 512],
    origin: Instant,
    assumed_quota: Option<i64>,
    assumed_cpus: Option<usize>,
    metrics: Option<SuppressMetrics>,
    warned_read: bool,
    warned_scope: bool,
    cgroups: Arc<Cgroups>,
    scope: Option<Arc<CpusetScope>>,
    scope_available: usize,
    scope_updates: Option<watch::Receiver<Option<Arc<CpusetScope>>>>,
    /// Which policy's "restore the other resource" plan has been applied.
    settle: Settle,
}

impl SuppressLoop {
    /// A loop writing through `cgroups`. Files are opened lazily (and reopened after an error:
    /// the kubepods tree may not exist yet when the agent starts).
    pub fn new(
        cgroups: Arc<Cgroups>,
        config: SuppressLoopConfig,
        metrics: Option<SuppressMetrics>,
    ) -> Result<Self, SystemError> {
        let version = cgroups.version();
        let usage = |dir: &CgroupDir| -> Result<CounterFile, SystemError> {
            let path = cgroups.file_path(CgroupResource::CpuUsage, dir)?;
            let kind = match version {
                CgroupVersion::V1 => CounterKind::CgroupNs,
                CgroupVersion::V2 => CounterKind::CpuStatUsec,
            };
            Ok(CounterFile::new(path, kind))
        };
        let node = match &config.node_counter {
            NodeCounter::ProcStat(path) => CounterFile::new(path.clone(), CounterKind::ProcStat),
            NodeCounter::Cgroup(dir) => usage(dir)?,
        };
        let kubepods = usage(&config.kubepods)?;
        let be = usage(&config.besteffort)?;
        let quota = CounterFile::new(
            cgroups.file_path(CgroupResource::CpuCfsQuota, &config.besteffort)?,
            match version {
                CgroupVersion::V1 => CounterKind::Int,
                CgroupVersion::V2 => CounterKind::CpuMax,
            },
        );
        // The CPUs BE can use: on v2 the kubelet leaves besteffort's `cpuset.cpus` empty, which
        // means "the parent's", so only the effective set counts them.
        let be_cpus = match version {
            CgroupVersion::V1 => CgroupResource::CpusetCpus,
            CgroupVersion::V2 => CgroupResource::CpusetCpusEffective,
        };
        let be_cpuset = CounterFile::new(
            cgroups.file_path(be_cpus, &config.besteffort)?,
            CounterKind::CpuList,
        );
        let executor = Executor::new(
            cgroups.clone(),
            ExecutorConfig {
                dry_run: config.dry_run,
                ..ExecutorConfig::default()
            },
        );
        Ok(Self {
            fast: FastSuppress::new(config.fast),
            config,
            executor,
            node,
            kubepods,
            be,
            quota,
            be_cpuset,
            host_apps: Vec::new(),
            buf: [0; 512],
            origin: Instant::now(),
            assumed_quota: None,
            assumed_cpus: None,
            metrics,
            warned_read: false,
            warned_scope: false,
            cgroups,
            scope: None,
            scope_available: 0,
            scope_updates: None,
            settle: Settle::default(),
        })
    }

    /// Takes [`CpusetScope`] updates from the QoS round (policy `cpuset` needs them).
    pub fn with_scope_updates(mut self, mut updates: watch::Receiver<Option<Arc<CpusetScope>>>) -> Self {
        // The value already in the channel counts as seen by a new receiver: take it now.
        let current = updates.borrow_and_update().clone();
        self.set_cpuset_scope(current);
        self.scope_updates = Some(updates);
        self
    }

    /// Sets the BE tree and CPU pools used by policy `cpuset` (what the QoS round publishes).
    pub fn set_cpuset_scope(&mut self, scope: Option<Arc<CpusetScope>>) {
        if scope == self.scope {
            return;
        }
        self.scope_available = scope.as_ref().map_or(0, |s| s.pools.be_full().len());
        let hosts: &[String] = scope.as_ref().map_or(&[], |s| s.host_apps.as_slice());
        if !self.host_apps.iter().map(|(d, _)| d).eq(hosts.iter()) {
            let kind = match self.cgroups.version() {
                CgroupVersion::V1 => CounterKind::CgroupNs,
                CgroupVersion::V2 => CounterKind::CpuStatUsec,
            };
            self.host_apps = hosts
                .iter()
                .filter_map(|d| {
                    let dir = CgroupDir::new(d).ok()?;
                    let path = self.cgroups.file_path(CgroupResource::CpuUsage, &dir).ok()?;
                    Some((d.clone(), CounterFile::new(path, kind)))
                })
                .collect();
            // The sum behind `host_ns` changed: the next reading is a new baseline.
            self.fast.rebase();
        }
        self.scope = scope;
        // A new BE pod (or new pools) gets its cpuset at the next tick.
        self.settle.scope_changed();
    }

    fn cpuset_size(&mut self) -> Option<CpusetSize> {
        let scope = self.scope.as_ref()?;
        let min = scope.pools.min_cpus();
        let current = match self.assumed_cpus.filter(|_| self.config.dry_run) {
            Some(n) => n,
            None => usize::try_from(self.be_cpuset.read(&mut self.buf).ok()?).ok()?,
        };
        Some(CpusetSize {
            current,
            available: self.scope_available,
            min,
        })
    }

    fn sample(&mut self, now: Instant) -> Result<CounterSample, SystemError> {
        let node = self.node.read(&mut self.buf)?;
        let node_busy_ns = match self.node.kind() {
            CounterKind::ProcStat => node.saturating_mul(1_000_000_000 / USER_HZ),
            _ => node,
        };
        Ok(CounterSample {
            at: now.saturating_duration_since(self.origin),
            node_busy_ns,
            kubepods_ns: self.kubepods.read(&mut self.buf)?,
            be_ns: self.be.read(&mut self.buf)?,
            // A host application whose cgroup is gone counts as idle (its sum then goes
            // backwards once, which the decision core skips as a reset).
            host_ns: self
                .host_apps
                .iter_mut()
                .map(|(_, f)| f.read(&mut self.buf).unwrap_or(0))
                .fold(0u64, u64::saturating_add),
        })
    }

    fn current_quota(&mut self) -> Option<i64> {
        if self.config.dry_run && self.assumed_quota.is_some() {
            return self.assumed_quota;
        }
        self.quota.read_signed(&mut self.buf).ok()
    }

    /// Reads what a tick decides on: the counters, scope updates from the QoS round, the
    /// besteffort quota and (policy `cpuset`) cpuset size. `None` when the counters cannot be
    /// read (warned once until they can again).
    fn observe(&mut self, now: Instant, strategy: Option<&ResourceThresholdStrategy>) -> Option<Observation> {
        let sample = match self.sample(now) {
            Ok(s) => {
                self.warned_read = false;
                s
            }
            Err(e) => {
                if !self.warned_read {
                    warn!(strategy = STRATEGY, error = %e, "fast suppress: cannot read counters; retrying every tick");
                    self.warned_read = true;
                }
                return None;
            }
        };
        if let Some(rx) = &mut self.scope_updates
            && rx.has_changed().unwrap_or(false)
        {
            let scope = rx.borrow_and_update().clone();
            self.set_cpuset_scope(scope);
        }
        let mode = SuppressMode::of(strategy);
        if mode == SuppressMode::Cpuset && self.scope.is_none() {
            if !self.warned_scope {
                info!(
                    strategy = STRATEGY,
                    "fast suppress: policy cpuset waits for the QoS round's BE tree and CPU pools"
                );
                self.warned_scope = true;
            }
        } else {
            self.warned_scope = false;
        }
        let current_quota_us = self.current_quota();
        let cpus = if mode == SuppressMode::Cpuset {
            self.cpuset_size()
        } else {
            None
        };
        Some(Observation {
            sample,
            mode,
            current_quota_us,
            cpus,
        })
    }

    /// One tick at `now` with the effective strategy (`None`: suppress off) and node CPU:
    /// observe, decide ([`FastSuppress::tick`], then [`fast_write`]), act; then, when the tick
    /// wrote nothing, settle the resource the policy does not drive ([`Settle::step`]).
    pub fn tick(
        &mut self,
        now: Instant,
        strategy: Option<&ResourceThresholdStrategy>,
        node: NodeCpu,
    ) -> TickOutcome {
        let Some(seen) = self.observe(now, strategy) else {
            return TickOutcome::ReadFailed;
        };
        let action = self
            .fast
            .tick(seen.sample, strategy, node, seen.current_quota_us, seen.cpus);
        let has_scope = self.scope.is_some();
        let write = fast_write(&action, seen.current_quota_us, seen.cpus, has_scope);
        log_action(&action, &seen, has_scope, self.config.dry_run);
        let outcome = match write {
            None => TickOutcome::Idle,
            Some(FastWrite::Quota { quota_us, direction }) => {
                self.write_quota(now, quota_us, direction.as_str())
            }
            Some(FastWrite::Plan(plan)) => self.run_plan(now, strategy, node, plan),
        };
        // Once per policy change (and per new BE pod under cpuset): restore what the policy
        // does not use, and under cpuset give every BE dir the chosen set.
        let cpuset_known = self.fast.budget_milli().is_some() && seen.cpus.is_some();
        let acted = outcome != TickOutcome::Idle;
        let outcome = match self.settle.step(seen.mode, acted, has_scope, cpuset_known) {
            Some(step) => self.run_plan(now, strategy, node, step.write()),
            None => outcome,
        };
        if let Some(m) = &self.metrics {
            m.telemetry.upstream.record_suppress(
                seen.mode,
                allowed_milli(seen.mode, outcome, &seen),
                &self.fast.usage(),
            );
        }
        outcome
    }

    /// Applies a full suppress plan, records the mode it settles when it went through and
    /// reports it as the plan says.
    fn run_plan(
        &mut self,
        now: Instant,
        strategy: Option<&ResourceThresholdStrategy>,
        node: NodeCpu,
        plan: PlanWrite,
    ) -> TickOutcome {
        let strategy = if plan.with_strategy { strategy } else { None };
        let out = self.apply_plan(now, strategy, node, |w| plan.keeps(w), plan.direction.as_str());
        if out != TickOutcome::Idle {
            self.settle.settled(plan.settles);
        }
        match (plan.report, out) {
            (PlanReport::Silent, _) => TickOutcome::Idle,
            (PlanReport::QuotaRestored, TickOutcome::WroteCpuset(_)) => TickOutcome::Wrote(-1),
            (PlanReport::Cpuset | PlanReport::QuotaRestored, out) => out,
        }
    }

    /// Runs the full suppress decision with the scope and the besteffort dir's current values
    /// and applies its writes (those `keep` selects) through the executor. Returns
    /// `WroteCpuset(n)` (n = CPUs of the besteffort set written, or now) when the plan went
    /// through without error, `Idle` otherwise (no scope, a failed write: retried next tick).
    fn apply_plan(
        &mut self,
        now: Instant,
        strategy: Option<&ResourceThresholdStrategy>,
        node: NodeCpu,
        keep: impl Fn(&CgroupWrite) -> bool,
        direction: &str,
    ) -> TickOutcome {
        let Some(scope) = self.scope.clone() else {
            return TickOutcome::Idle;
        };
        let mut be = scope.be.clone();
        be.besteffort.cfs_quota_us = self.current_quota();
        be.besteffort.cpuset = match self.cgroups.version() {
            CgroupVersion::V1 => self.cgroups.cpuset_cpus(&be.besteffort.dir),
            // An empty v2 `cpuset.cpus` is the parent's set, not "no CPUs".
            CgroupVersion::V2 => self.cgroups.effective_cpus(&be.besteffort.dir),
        }
        .ok();
        let plan = self.fast.full_plan(strategy, node, &be, &scope.pools);
        if !plan.reason.is_empty() {
            warn!(strategy = STRATEGY, reason = %plan.reason, "cpu suppress: plan incomplete");
        }
        let mut writes = Vec::with_capacity(plan.writes.len());
        let mut be_cpus = None;
        let mut be_quota = None;
        for w in plan.writes.iter().filter(|w| keep(w)) {
            if w.cgroup == be.besteffort.dir {
                match &w.value {
                    CgroupValue::Int(q) => be_quota = Some(*q),
                    CgroupValue::Cpus(c) => be_cpus = Some(c.len()),
                }
            }
            writes.push(w.clone());
        }
        let report = self.apply(writes, now, direction, "BE cpuset/quota write failed");
        if !report.errors.is_empty() {
            return TickOutcome::Idle;
        }
        if let Some(q) = be_quota {
            self.assumed_quota = Some(q);
        }
        // The last besteffort cpuset write is its final value (a widening comes first).
        let n = be_cpus
            .or_else(|| be.besteffort.cpuset.as_ref().map(CpuList::len))
            .unwrap_or(0);
        self.assumed_cpus = Some(n);
        TickOutcome::WroteCpuset(n)
    }

    /// Applies `writes` through the executor, logs each failed write with `failure` and
    /// records the outcome (and a write in `direction` when anything changed) in the metrics.
    fn apply(
        &mut self,
        writes: Vec<CgroupWrite>,
        now: Instant,
        direction: &str,
        failure: &str,
    ) -> ApplyReport {
        let telemetry = self.metrics.as_ref().map(|m| &m.telemetry);
        let report = crate::act::apply_run(&mut self.executor, telemetry, STRATEGY, &writes, now);
        for f in &report.errors {
            warn!(strategy = STRATEGY, error = %f.error, "{failure}");
        }
        if let Some(m) = &self.metrics
            && !report.changes.is_empty()
        {
            m.writes
                .get_or_create(&vec![("direction".to_string(), direction.to_string())])
                .inc();
        }
        report
    }

    fn write_quota(&mut self, now: Instant, quota_us: i64, direction: &str) -> TickOutcome {
        let write = CgroupWrite {
            cgroup: self.config.besteffort.clone(),
            resource: CgroupResource::CpuCfsQuota,
            value: CgroupValue::Int(quota_us),
            strategy: STRATEGY.into(),
        };
        let report = self.apply(vec![write], now, direction, "besteffort quota write failed");
        if report.errors.is_empty() {
            self.assumed_quota = Some(quota_us);
            TickOutcome::Wrote(quota_us)
        } else {
            TickOutcome::Idle
        }
    }

    /// Runs the loop every `config.interval` until the task is dropped. The strategy is the
    /// snapshot's NodeSLO `resourceUsedThresholdWithBE`; until a NodeSLO has been seen nothing
    /// is written (the counters are still sampled). With the `BECPUSuppress` gate off the loop
    /// does not run at all (it never touches a file it does not own).
    pub async fn run(mut self, mut snapshots: watch::Receiver<Snapshot>, gates: FeatureGates) {
        let mut ticker = tokio::time::interval(self.config.interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        if !gates.enabled("BECPUSuppress") {
            info!(
                strategy = STRATEGY,
                "feature gate BECPUSuppress is off: fast suppress loop not running"
            );
            return;
        }
        let mut inputs = Inputs::from_snapshot(&snapshots.borrow_and_update());
        loop {
            ticker.tick().await;
            if snapshots.has_changed().unwrap_or(false) {
                inputs = Inputs::from_snapshot(&snapshots.borrow_and_update());
            }
            let now = Instant::now();
            if !inputs.slo_seen {
                let _ = self.sample(now).map(|s| self.fast.observe(s));
                continue;
            }
            self.tick(now, inputs.strategy.as_ref(), inputs.node);
        }
    }
}

/// What the loop takes from the snapshot (recomputed only when the snapshot changes).
struct Inputs {
    slo_seen: bool,
    strategy: Option<ResourceThresholdStrategy>,
    node: NodeCpu,
}

impl Inputs {
    fn from_snapshot(s: &Snapshot) -> Self {
        let strategy = s
            .node_slo
            .as_ref()
            .and_then(|slo| slo.resource_used_threshold_with_be.clone());
        Inputs {
            slo_seen: s.node_slo.is_some(),
            strategy,
            node: s.node.as_deref().map(node_cpu).unwrap_or_default(),
        }
    }
}

fn parse_error(path: &std::path::Path, what: &'static str, detail: &str) -> SystemError {
    SystemError::parse(path.to_path_buf(), ParseError::new(what, detail.to_owned()))
}

/// The agent's loop settings: tick `interval`, `dry_run`, `/proc/stat` for the node, the
/// kubelet's `kubepods` and besteffort cgroups for the driver in use.
pub fn node_config(
    interval: Duration,
    dry_run: bool,
    roots: &crate::system::SystemRoots,
    paths: &crate::system::KubeCgroupPaths,
) -> SuppressLoopConfig {
    SuppressLoopConfig {
        interval,
        dry_run,
        fast: FastSuppressConfig::default(),
        node_counter: NodeCounter::ProcStat(roots.proc_file("stat")),
        kubepods: paths.kubepods_dir(),
        besteffort: paths.qos_dir(KubeQoSClass::BestEffort),
    }
}

#[cfg(test)]
mod tests;
