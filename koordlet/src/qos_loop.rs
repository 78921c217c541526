//! The live QoS round: after each metric collection, gather the engine's input (snapshot,
//! metric stores, cgroup reads), run every strategy, apply the cgroup writes through the
//! executor and hand the evictions to the evictor.
//!
//! cpu_suppress is decided every round (its numbers are logged on change) but its writes are
//! applied only when [`QosLoopConfig::apply_cpu_suppress`] is set: the fast path owns the live
//! suppress writes.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Mutex, watch};
use tracing::{error, info, warn};

use crate::act;
use crate::cpuset_state::{CpusetStateFile, LoadedState};
use crate::evictor::Evictor;
use crate::executor::Executor;
use crate::gather;
use crate::metrics::MetricTime;
use crate::metrics::collector::Stores;
use crate::resctrl_loop::ResctrlReconciler;
use crate::states::Snapshot;
use crate::system::cgroup_stats::CpuThrottling;
use crate::system::core_sched::CoreScheduler;
use crate::system::cpu_qos::probe_cpu_qos;
use crate::system::{Cgroups, KubeCgroupPaths};
use crate::telemetry::Telemetry;
use koord_api::nodeslo::CpuBurstPolicy;
use koordlet_core::features::FeatureGates;
use koordlet_core::strategies::be_limits;
use koordlet_core::strategies::cpu_evict;
use koordlet_core::strategies::cpu_qos::CpuQosKernel;
use koordlet_core::strategies::cpuset::CpuInfo;
use koordlet_core::strategies::cpuset_policy::{self, KubeletCpuManager, RuntimeCpusets};
use koordlet_core::strategies::engine::{
    self, EngineCache, EngineInput, EngineOptions, EngineState, NodeFacts, Report,
};
use koordlet_core::strategies::fast_suppress::CpusetScope;

/// Event reason on a pod whose CPU set policy could not be applied (unsatisfiable,
/// ineligible container, bad annotation).
pub const CPUSET_POLICY_EVENT_REASON: &str = "CPUSetPolicyNotApplied";

/// What the agent decides about the round.
#[derive(Debug, Clone, Copy)]
pub struct QosLoopConfig {
    /// Apply cpu_suppress writes here (off while the fast path owns them).
    pub apply_cpu_suppress: bool,
    /// The collect interval.
    pub collect_interval: Duration,
}

/// The node a round observes and acts on: cgroups and paths to read, the CPU topology, and the
/// executor, evictor and metrics that carry the decisions out.
pub struct QosEdges {
    /// The node's cgroups.
    pub cgroups: Arc<Cgroups>,
    /// The kubelet's cgroup layout.
    pub paths: KubeCgroupPaths,
    /// The CPU topology, from [`crate::gather::read_topology`].
    pub topology: Vec<CpuInfo>,
    /// Applies the cgroup writes.
    pub executor: Executor,
    /// Evicts the picked pods.
    pub evictor: Evictor,
    /// The agent's metrics.
    pub telemetry: Telemetry,
}

/// One QoS round's carried state and edges.
pub struct QosLoop {
    config: QosLoopConfig,
    gates: FeatureGates,
    cgroups: Arc<Cgroups>,
    paths: KubeCgroupPaths,
    topology: Vec<CpuInfo>,
    executor: Executor,
    evictor: Evictor,
    telemetry: Telemetry,
    started: Instant,
    state: EngineState,
    /// be_limits decisions reused between rounds while a pod does not change.
    engine_cache: EngineCache,
    throttling: HashMap<String, CpuThrottling>,
    burst_sources: HashMap<String, String>,
    last_skips: HashMap<&'static str, String>,
    cpuset_scope: Option<watch::Sender<Option<Arc<CpusetScope>>>>,
    /// `namespace/name` of pods whose burst policy was not `none` last round (read again when
    /// it becomes `none`, so their scaled quota is reset).
    burst_recent: HashSet<String>,
    /// The resctrl reconcile, on nodes that support it.
    resctrl: Option<ResctrlReconciler>,
    /// The CPU QoS files of this kernel, once probed (the kubepods cgroup exists).
    cpu_qos_kernel: Option<CpuQosKernel>,
    /// Core-scheduling cookies of LSR/LSE pods.
    core_sched: CoreScheduler,
    /// The last core-scheduling outcome logged (unsupported reason or errors), to log changes only.
    core_sched_logged: Option<String>,
    /// cpuset_policy's node-local edges.
    cpuset: CpusetEdges,
    /// Where the runtime hooks learn the CPU set policies' pools.
    runtime_cpusets: Option<watch::Sender<Option<Arc<RuntimeCpusets>>>>,
    /// The node's sysctls (`systemStrategy`), when its state could be loaded.
    system_config: Option<crate::system_config::SystemConfig>,
}

/// cpuset_policy's node-local edges: the kubelet's CPU manager policy, the state file, whether
/// the table must be rebuilt from the cgroups, and the problems already reported.
#[derive(Debug, Default)]
struct CpusetEdges {
    kubelet: KubeletCpuManager,
    file: Option<CpusetStateFile>,
    rebuild: bool,
    reported: HashSet<(String, Option<String>, String)>,
}

/// The strategies' reports as (name, skip reason) pairs.
fn skips(s: &engine::Strategies) -> [(&'static str, Option<&str>); 10] {
    fn reason<T>(r: &Report<T>) -> Option<&str> {
        match r {
            Report::Skipped { skipped } => Some(skipped),
            Report::Ran(_) => None,
        }
    }
    [
        ("be_limits", reason(&s.be_limits)),
        ("cpu_suppress", reason(&s.cpu_suppress)),
        ("cpu_burst", reason(&s.cpu_burst)),
        ("cpu_evict", reason(&s.cpu_evict)),
        ("memory_evict", reason(&s.memory_evict)),
        ("memory_evict_by_priority", reason(&s.memory_evict_by_priority)),
        ("cpu_qos", reason(&s.cpu_qos)),
        ("core_sched", reason(&s.core_sched)),
        ("cpuset_policy", reason(&s.cpuset_policy)),
        ("memory_qos", reason(&s.memory_qos)),
    ]
}

impl QosLoop {
    /// Builds the round's state.
    pub fn new(config: QosLoopConfig, gates: FeatureGates, edges: QosEdges) -> Self {
        let QosEdges {
            cgroups,
            paths,
            topology,
            executor,
            evictor,
            telemetry,
        } = edges;
        QosLoop {
            config,
            gates,
            cgroups,
            paths,
            topology,
            executor,
            evictor,
            telemetry,
            started: Instant::now(),
            // No satisfaction eviction before a full cool-down of data exists (upstream).
            state: EngineState {
                cpu_evict_last: Some(0.0),
                ..EngineState::default()
            },
            engine_cache: EngineCache::new(),
            throttling: HashMap::new(),
            burst_sources: HashMap::new(),
            last_skips: HashMap::new(),
            cpuset_scope: None,
            burst_recent: HashSet::new(),
            resctrl: None,
            cpu_qos_kernel: None,
            core_sched: CoreScheduler::new(),
            core_sched_logged: None,
            cpuset: CpusetEdges::default(),
            runtime_cpusets: None,
            system_config: None,
        }
    }

    /// Applies the NodeSLO's `systemStrategy` (gate SystemConfig) each round through `system_config`.
    pub fn with_system_config(mut self, system_config: crate::system_config::SystemConfig) -> Self {
        self.system_config = Some(system_config);
        self
    }

    /// The kernel's CPU QoS files, probed once the kubepods cgroup exists (until then: none).
    fn cpu_qos_kernel(&mut self) -> CpuQosKernel {
        if let Some(known) = self.cpu_qos_kernel {
            return known;
        }
        match probe_cpu_qos(&self.cgroups, &self.paths) {
            Ok(kernel) => {
                info!(
                    cpu_idle = kernel.idle,
                    cpu_bvt_warp_ns = kernel.bvt,
                    "CPU QoS files probed"
                );
                self.cpu_qos_kernel = Some(kernel);
                kernel
            }
            Err(_) => CpuQosKernel::default(),
        }
    }

    /// Runs the resctrl reconcile after every round (`None`: the node does not support it).
    pub fn with_resctrl(mut self, resctrl: Option<ResctrlReconciler>) -> Self {
        self.resctrl = resctrl;
        self
    }

    /// Sets what CPU set policies need from the node: the kubelet's CPU manager policy and the
    /// allocation state file, read now (a corrupt file is reported and the table rebuilt from
    /// the cgroups at the first round with a pod list).
    pub fn with_cpuset_policy(
        mut self,
        kubelet: KubeletCpuManager,
        mut file: Option<CpusetStateFile>,
    ) -> Self {
        if let Some(f) = &mut file {
            match f.load() {
                LoadedState::Table(table) => {
                    info!(path = %f.path().display(), allocations = table.allocations.len(),
                          "cpuset policy state loaded");
                    self.state.cpuset_policy = table;
                }
                LoadedState::Missing => {}
                LoadedState::Corrupt(reason) => {
                    error!(strategy = cpuset_policy::STRATEGY, reason = %reason,
                           "cpuset policy state file unusable: rebuilding the allocations from the cgroups");
                    self.cpuset.rebuild = true;
                }
            }
        }
        // The first round checks every container's cpuset, whatever an earlier koordlet (or
        // one without this flag) left narrowed.
        self.state.cpuset_policy.narrowed = true;
        self.cpuset.kubelet = kubelet;
        self.cpuset.file = file;
        self
    }

    /// Publishes the CPU set policies' pools and allocations to the runtime hooks after every
    /// round in which they changed (`None` while the policies are idle on this node).
    pub fn with_runtime_cpusets(mut self, tx: watch::Sender<Option<Arc<RuntimeCpusets>>>) -> Self {
        self.runtime_cpusets = Some(tx);
        self
    }

    /// Publishes the BE tree and CPU pools to the fast suppress loop (policy `cpuset`) after
    /// every round in which they changed.
    pub fn with_cpuset_scope(mut self, tx: watch::Sender<Option<Arc<CpusetScope>>>) -> Self {
        self.cpuset_scope = Some(tx);
        self
    }

    /// One round at `now` (the collection's time).
    pub async fn round(&mut self, snapshot: &Snapshot, stores: &Mutex<Stores>, now: MetricTime) {
        if !snapshot.pods_synced {
            self.log_skip("all", Some("no pod list yet"));
            return;
        }
        self.log_skip("all", None);
        let interval = self.config.collect_interval.as_secs_f64();
        let slo = snapshot.node_slo.as_deref();
        let default_threshold = Default::default();
        let threshold = slo
            .and_then(|s| s.resource_used_threshold_with_be.as_ref())
            .unwrap_or(&default_threshold);
        let be_window = Duration::from_secs_f64(cpu_evict::window_seconds(threshold, interval));
        let usage = {
            let stores = stores.lock().await;
            gather::live_usage(
                &stores,
                &snapshot.pods,
                slo.and_then(|s| s.host_applications.as_deref()).unwrap_or(&[]),
                now,
                self.config.collect_interval * 3,
                be_window,
            )
        };
        let scope = engine::ReadScope {
            be_pods: self.config.apply_cpu_suppress,
            burst: slo
                .and_then(|s| s.cpu_burst_strategy.as_ref())
                .filter(|_| self.gates.enabled("CPUBurst")),
            skip_burst_none: true,
            burst_recent: Some(&self.burst_recent),
            cpuset_policy: self.cpuset.rebuild
                || engine::cpuset_policy_wanted(&snapshot.pods, &self.state.cpuset_policy),
        };
        let reads = engine::cgroup_reads(&snapshot.pods, &self.paths, scope);
        let mut cgroups = gather::read_cgroup_facts(&self.cgroups, &reads, Some(&mut self.throttling));
        cgroups.cpu_qos_kernel = self.cpu_qos_kernel();
        let mut node = snapshot
            .node
            .as_deref()
            .map(NodeFacts::from_node)
            .unwrap_or_default();
        node.kubelet_cpu_manager = self.cpuset.kubelet.clone();
        node.memory_qos_kernel = gather::memory_qos_kernel(&self.cgroups, &self.paths);
        let wall = Instant::now();
        let in_flight = self.evictor.in_flight(&snapshot.pods, wall);
        let input = EngineInput {
            node: &node,
            pods: &snapshot.pods,
            paths: &self.paths,
            node_slo: slo,
            gates: &self.gates,
            usage: &usage,
            cgroups: &cgroups,
            topology: &self.topology,
            in_flight: &in_flight,
            state: &self.state,
            now_seconds: self.started.elapsed().as_secs_f64(),
            options: EngineOptions {
                apply_cpu_suppress: self.config.apply_cpu_suppress,
                collect_interval_seconds: interval,
                ..EngineOptions::default()
            },
        };
        let rebuilt;
        let input = if self.cpuset.rebuild {
            self.cpuset.rebuild = false;
            let table = engine::rebuild_cpuset_allocations(&input);
            info!(
                strategy = cpuset_policy::STRATEGY,
                allocations = table.allocations.len(),
                "cpuset policy allocations rebuilt from the cgroups"
            );
            rebuilt = EngineState {
                cpuset_policy: table,
                ..self.state.clone()
            };
            EngineInput {
                state: &rebuilt,
                ..input
            }
        } else {
            input
        };
        let plan = engine::run_cached(&input, &mut self.engine_cache);
        if let Some(tx) = &self.cpuset_scope
            && self.gates.enabled("BECPUSuppress")
        {
            let scope = engine::cpuset_scope(&input);
            tx.send_if_modified(|cur| {
                if cur.as_deref() == Some(&scope) {
                    return false;
                }
                *cur = Some(Arc::new(scope));
                true
            });
        }
        if let Some(tx) = &self.runtime_cpusets {
            let next = match &plan.strategies.cpuset_policy {
                Report::Ran(p) => Some(&p.runtime),
                Report::Skipped { .. } => None,
            };
            tx.send_if_modified(|cur| {
                if cur.as_deref() == next {
                    return false;
                }
                *cur = next.cloned().map(Arc::new);
                true
            });
        }
        self.state = plan.next_state.clone();
        for problem in self.cpuset_policy_edges(&plan) {
            if let Some(pod) = snapshot.pods.iter().find(|p| p.uid.as_str() == problem.uid) {
                let note = match &problem.container {
                    Some(c) => format!("container {c}: {}", problem.reason),
                    None => problem.reason.clone(),
                };
                self.evictor
                    .warn_pod(pod, CPUSET_POLICY_EVENT_REASON, "PinCPUs", &note)
                    .await;
            }
        }
        for (strategy, reason) in skips(&plan.strategies) {
            self.log_skip(strategy, reason);
        }
        // Only once a NodeSLO was seen: before it, "no strategy" would restore the node's values.
        if let (Some(sc), Some(slo)) = (&mut self.system_config, slo) {
            let strategy = slo
                .system_strategy
                .as_ref()
                .filter(|_| self.gates.enabled(koordlet_core::strategies::system_config::GATE));
            let sysctls = sc.round(strategy, node.memory_capacity_bytes);
            let skipped: Vec<String> = sysctls
                .skipped
                .iter()
                .map(|k| format!("{}: {}", k.knob, k.reason))
                .collect();
            let reason = (!skipped.is_empty()).then(|| skipped.join("; "));
            self.log_skip("system_config", reason.as_deref());
        }
        self.burst_recent = plan
            .strategies
            .cpu_burst
            .ran()
            .map(|b| {
                b.pods
                    .iter()
                    .filter(|p| p.config.policy != CpuBurstPolicy::None)
                    .map(|p| format!("{}/{}", p.namespace, p.name))
                    .collect()
            })
            .unwrap_or_default();
        let burst_pods = plan.strategies.cpu_burst.ran().map_or(&[][..], |b| &b.pods[..]);
        self.telemetry.upstream.record_cpu_burst(burst_pods);
        if let Some(burst) = plan.strategies.cpu_burst.ran() {
            for pod in &burst.pods {
                let key = format!("{}/{}", pod.namespace, pod.name);
                if self.burst_sources.get(&key) != Some(&pod.source) {
                    info!(pod = %key, source = %pod.source, policy = ?pod.config.policy,
                          cpu_burst_percent = pod.config.cpu_burst_percent, "cpu_burst strategy picked");
                    self.burst_sources.insert(key, pod.source.clone());
                }
            }
        }
        // Apply in plan order, one executor call per run of writes from the same strategy:
        // be_limits first (its writes shared with the cache between rounds), then the rest.
        if let Some(round) = &plan.be_limits_round
            && !round.has_no_writes()
        {
            act::apply_run(
                &mut self.executor,
                Some(&self.telemetry),
                be_limits::STRATEGY,
                round.writes(),
                Instant::now(),
            );
        }
        act::apply_in_plan_order(
            &mut self.executor,
            Some(&self.telemetry),
            &plan.writes,
            Instant::now(),
        );
        if let Some(core_sched) = plan.strategies.core_sched.ran() {
            self.apply_core_sched(core_sched);
        }
        self.telemetry
            .unsupported
            .set(i64::try_from(self.cgroups.unsupported_reported()).unwrap_or(i64::MAX));
        if self.resctrl.is_some() {
            self.log_skip("resctrl", slo.is_none().then_some("no NodeSLO yet"));
            if let (Some(r), Some(slo)) = (&mut self.resctrl, slo) {
                let report = r.round(slo, &snapshot.pods);
                let written = u64::try_from(report.written.len()).unwrap_or(u64::MAX);
                if written > 0 {
                    self.telemetry
                        .cgroup_writes
                        .get_or_create(&vec![
                            ("strategy".to_string(), "resctrl".to_string()),
                            ("result".to_string(), "changed".to_string()),
                        ])
                        .inc_by(written);
                }
            }
        }
        self.evictor.flush_backlog().await;
        if !plan.evictions.is_empty() {
            self.evictor
                .evict(&plan.evictions, &snapshot.pods, Instant::now())
                .await;
        }
    }

    fn apply_core_sched(&mut self, plan: &koordlet_core::strategies::cpu_qos::CoreSchedPlan) {
        if self.executor.dry_run() {
            let outcome = Some(format!("dry run: {} pods would get a cookie", plan.pods.len()));
            if outcome != self.core_sched_logged {
                info!(
                    pods = plan.pods.len(),
                    "dry run: core-scheduling cookies not given"
                );
                self.core_sched_logged = outcome;
            }
            return;
        }
        let report = self.core_sched.apply(plan, &self.cgroups);
        if report.created + report.shared > 0 {
            info!(
                created = report.created,
                shared = report.shared,
                pods = plan.pods.len(),
                "core scheduling cookies given"
            );
        }
        let outcome = report
            .unsupported
            .clone()
            .or_else(|| (!report.errors.is_empty()).then(|| report.errors.join("; ")));
        if outcome != self.core_sched_logged {
            if let Some(problem) = &outcome {
                warn!(problem = %problem, "core scheduling not applied");
            }
            self.core_sched_logged = outcome;
        }
    }

    /// Logs new cpuset_policy problems (once each) and returns them for an Event each, counts
    /// the current ones, saves the table.
    fn cpuset_policy_edges(&mut self, plan: &engine::EnginePlan) -> Vec<cpuset_policy::Problem> {
        let problems = plan
            .strategies
            .cpuset_policy
            .ran()
            .map(|p| p.problems.as_slice())
            .unwrap_or(&[]);
        let now: HashSet<_> = problems
            .iter()
            .map(|p| (p.pod.clone(), p.container.clone(), p.reason.clone()))
            .collect();
        let mut fresh = Vec::new();
        for p in problems {
            if !self
                .cpuset
                .reported
                .contains(&(p.pod.clone(), p.container.clone(), p.reason.clone()))
            {
                warn!(strategy = cpuset_policy::STRATEGY, pod = %p.pod,
                      container = p.container.as_deref().unwrap_or(""), reason = %p.reason,
                      "cpuset policy not applied");
                fresh.push(p.clone());
            }
        }
        self.telemetry
            .cpuset_policy_problems
            .set(i64::try_from(now.len()).unwrap_or(i64::MAX));
        self.cpuset.reported = now;
        if !self.executor.dry_run()
            && let Some(file) = &mut self.cpuset.file
            && let Err(e) = file.save_if_changed(&self.state.cpuset_policy)
        {
            warn!(strategy = cpuset_policy::STRATEGY, error = %e, "cpuset policy state not saved; retried next round");
        }
        fresh
    }

    fn log_skip(&mut self, strategy: &'static str, reason: Option<&str>) {
        let now = reason.unwrap_or("").to_owned();
        if self.last_skips.get(strategy) == Some(&now) {
            return;
        }
        match reason {
            Some(r) => info!(strategy, reason = r, "strategy skipped"),
            None if self.last_skips.contains_key(strategy) => info!(strategy, "strategy running"),
            None => {}
        }
        self.last_skips.insert(strategy, now);
    }
}
