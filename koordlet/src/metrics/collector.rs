//! Collectors: one round reads `/proc/stat`, `/proc/meminfo`, every pod's and container's CPU and
//! memory cgroup files and the node's PSI, and appends samples to the stores.
//!
//! CPU is a rate: the round keeps the previous cumulative counter of each object and stores
//! `Δns / Δwall` (cores); the first round of an object only primes it. Memory follows the
//! NodeMetric memory collect policy: node `MemTotal − MemAvailable` (or `− MemFree` with page
//! cache); pods and containers `usage − inactive_file` (working set; the whole usage with page
//! cache). Derived per round: BE totals (usage, batch-cpu requests) and the system usage
//! `max(node − Σ pods, 0)`.
//!
//! Memory stays flat whatever the pod churn: the previous-counter map holds only objects seen in
//! this round, and the series of pods and containers that vanished are dropped from the store.

use std::collections::{HashMap, HashSet};

use koord_api::QoSClass;
use koord_api::nodemetric::MemoryCollectPolicy;
use koord_api::resources::container_amounts;

use super::{MetricKind, MetricStore, MetricTime, PsiResource, SeriesKey};
use crate::states::Snapshot;
use crate::system::meminfo::Meminfo;
use crate::system::proc_stat::{CpuTicks, ProcStat, USER_HZ, cpu_usage_cores};
use crate::system::psi::{NodePressure, PsiStats};
use crate::system::{CgroupDir, Cgroups, KubeCgroupPaths, SystemError, SystemRoots};

/// The two stores a collector fills: node-level series (long windows) and per-pod/container
/// series (short windows, many objects).
#[derive(Debug)]
pub struct Stores {
    /// Node, system, BE and PSI series.
    pub node: MetricStore,
    /// Pod and container series.
    pub pods: MetricStore,
}

impl Default for Stores {
    fn default() -> Self {
        Stores {
            node: MetricStore::new(super::StoreConfig::default()),
            pods: MetricStore::new(super::StoreConfig::pods()),
        }
    }
}

/// What one round did (for metrics and the benchmark).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoundSummary {
    /// Samples appended.
    pub samples: usize,
    /// Reads that failed (missing cgroup of a pod that just went away, unreadable file).
    pub read_errors: usize,
    /// Objects whose series were dropped because they vanished.
    pub dropped_objects: usize,
}

/// Collector state between rounds.
#[derive(Debug)]
pub struct Collector {
    cgroups: std::sync::Arc<Cgroups>,
    roots: SystemRoots,
    paths: KubeCgroupPaths,
    prev_node: Option<(MetricTime, CpuTicks)>,
    prev_cpu: HashMap<Box<str>, (MetricTime, u64)>,
    known_objects: HashSet<Box<str>>,
    psi_supported: bool,
}

impl Collector {
    /// A collector reading through `cgroups` and the proc root of `roots`.
    pub fn new(cgroups: std::sync::Arc<Cgroups>, roots: SystemRoots, paths: KubeCgroupPaths) -> Self {
        Collector {
            cgroups,
            roots,
            paths,
            prev_node: None,
            prev_cpu: HashMap::new(),
            known_objects: HashSet::new(),
            psi_supported: true,
        }
    }

    /// Objects whose previous CPU counter is held (bounded by the pods of the last round).
    pub fn tracked_objects(&self) -> usize {
        self.prev_cpu.len()
    }

    fn cpu_rate(
        &self,
        next: &mut HashMap<Box<str>, (MetricTime, u64)>,
        object: &str,
        dir: &CgroupDir,
        now: MetricTime,
    ) -> Result<Option<f64>, SystemError> {
        let ns = self.cgroups.cpu_usage_ns(dir)?;
        let rate = self.prev_cpu.get(object).and_then(|(t, prev)| {
            let elapsed_ns = (now.as_millis() - t.as_millis()).checked_mul(1_000_000)?;
            (elapsed_ns > 0).then_some(())?;
            Some(ns.checked_sub(*prev)? as f64 / elapsed_ns as f64)
        });
        next.insert(object.into(), (now, ns));
        Ok(rate)
    }

    fn memory(&self, dir: &CgroupDir, policy: MemoryCollectPolicy) -> Result<f64, SystemError> {
        let usage = self.cgroups.memory_usage_bytes(dir)?;
        if policy == MemoryCollectPolicy::UsageWithPageCache {
            return Ok(usage as f64);
        }
        Ok(self.cgroups.memory_stat(dir)?.working_set(usage) as f64)
    }

    /// One collection round at `now` over the snapshot's pods.
    pub fn collect(&mut self, snapshot: &Snapshot, now: MetricTime, stores: &mut Stores) -> RoundSummary {
        let mut summary = RoundSummary::default();
        let put = |store: &mut MetricStore, key: SeriesKey, value: f64, summary: &mut RoundSummary| {
            if store.append(&key, now, value).is_ok() {
                summary.samples += 1;
            }
        };
        let policy = snapshot.node_metric.memory_policy;

        // Node CPU and memory.
        let mut node_cpu = None;
        match ProcStat::read(&self.roots) {
            Ok(stat) => {
                if let Some((t, prev)) = self.prev_node {
                    let secs = (now.as_millis() - t.as_millis()) as f64 / 1000.0;
                    node_cpu = cpu_usage_cores(&prev, &stat.total, secs, USER_HZ);
                }
                self.prev_node = Some((now, stat.total));
            }
            Err(_) => summary.read_errors += 1,
        }
        if let Some(c) = node_cpu {
            put(
                &mut stores.node,
                SeriesKey::node(MetricKind::NodeCpuUsage),
                c,
                &mut summary,
            );
        }
        let mut node_memory = None;
        match Meminfo::read(&self.roots) {
            Ok(info) => {
                let without = info.mem_total.saturating_sub(info.mem_available) as f64;
                let with = info.mem_total.saturating_sub(info.mem_free) as f64;
                put(
                    &mut stores.node,
                    SeriesKey::node(MetricKind::NodeMemoryUsage),
                    without,
                    &mut summary,
                );
                put(
                    &mut stores.node,
                    SeriesKey::node(MetricKind::NodeMemoryUsageWithPageCache),
                    with,
                    &mut summary,
                );
                node_memory = Some(if policy == MemoryCollectPolicy::UsageWithPageCache {
                    with
                } else {
                    without
                });
            }
            Err(_) => summary.read_errors += 1,
        }

        // Pods and containers.
        let mut next_cpu = HashMap::with_capacity(self.prev_cpu.len());
        let mut seen: HashSet<Box<str>> = HashSet::with_capacity(self.known_objects.len());
        let (mut pods_cpu, mut pods_memory, mut pods_cpu_complete) = (0.0, 0.0, true);
        let (mut be_cpu, mut be_request_milli) = (0.0, 0i64);
        for pod in snapshot.pods.iter().filter(|p| p.is_running()) {
            let uid = pod.uid.as_str();
            seen.insert(uid.into());
            let dir = pod.cgroup_dir(&self.paths);
            let is_be = pod.qos == QoSClass::Be;
            match self.cpu_rate(&mut next_cpu, uid, &dir, now) {
                Ok(Some(cores)) => {
                    put(
                        &mut stores.pods,
                        SeriesKey::of(MetricKind::PodCpuUsage, uid),
                        cores,
                        &mut summary,
                    );
                    pods_cpu += cores;
                    if is_be {
                        be_cpu += cores;
                    }
                }
                Ok(None) => pods_cpu_complete = false,
                Err(_) => summary.read_errors += 1,
            }
            match self.memory(&dir, policy) {
                Ok(bytes) => {
                    put(
                        &mut stores.pods,
                        SeriesKey::of(MetricKind::PodMemoryUsage, uid),
                        bytes,
                        &mut summary,
                    );
                    pods_memory += bytes;
                }
                Err(_) => summary.read_errors += 1,
            }
            if is_be && let Some(spec) = pod.pod.spec.as_ref() {
                be_request_milli = spec
                    .containers
                    .iter()
                    .filter_map(|c| container_amounts(c).ok()?.batch_cpu_request())
                    .fold(be_request_milli, i64::saturating_add);
            }
            for container in &pod.containers {
                let (Some(id), Some(cdir)) = (&container.id, pod.container_dir(&self.paths, container))
                else {
                    continue;
                };
                let object = id.to_string();
                seen.insert(object.as_str().into());
                match self.cpu_rate(&mut next_cpu, &object, &cdir, now) {
                    Ok(Some(cores)) => put(
                        &mut stores.pods,
                        SeriesKey::of(MetricKind::ContainerCpuUsage, &object),
                        cores,
                        &mut summary,
                    ),
                    Ok(None) => {}
                    Err(_) => summary.read_errors += 1,
                }
                match self.memory(&cdir, policy) {
                    Ok(bytes) => put(
                        &mut stores.pods,
                        SeriesKey::of(MetricKind::ContainerMemoryUsage, &object),
                        bytes,
                        &mut summary,
                    ),
                    Err(_) => summary.read_errors += 1,
                }
            }
        }
        self.prev_cpu = next_cpu;
        for gone in self.known_objects.difference(&seen) {
            stores.pods.remove_object(gone);
            summary.dropped_objects += 1;
        }
        self.known_objects = seen;

        // Derived series.
        put(
            &mut stores.node,
            SeriesKey::node(MetricKind::BeCpuUsage),
            be_cpu,
            &mut summary,
        );
        put(
            &mut stores.node,
            SeriesKey::node(MetricKind::BeCpuRequest),
            be_request_milli as f64 / 1000.0,
            &mut summary,
        );
        if let (Some(node), true) = (node_cpu, pods_cpu_complete) {
            put(
                &mut stores.node,
                SeriesKey::node(MetricKind::SysCpuUsage),
                (node - pods_cpu).max(0.0),
                &mut summary,
            );
        }
        if let Some(node) = node_memory {
            put(
                &mut stores.node,
                SeriesKey::node(MetricKind::SysMemoryUsage),
                (node - pods_memory).max(0.0),
                &mut summary,
            );
        }
        if self.psi_supported {
            self.collect_psi(now, stores, &mut summary);
        }
        summary
    }

    fn collect_psi(&mut self, now: MetricTime, stores: &mut Stores, summary: &mut RoundSummary) {
        for (which, resource) in [
            (NodePressure::Cpu, PsiResource::Cpu),
            (NodePressure::Memory, PsiResource::Memory),
            (NodePressure::Io, PsiResource::Io),
        ] {
            match PsiStats::read_node(&self.roots, which) {
                Ok(stats) => {
                    let key = SeriesKey::node(MetricKind::PsiSomeAvg10(resource));
                    if stores.node.append(&key, now, stats.some.avg10).is_ok() {
                        summary.samples += 1;
                    }
                    if let Some(full) = stats.full {
                        let key = SeriesKey::node(MetricKind::PsiFullAvg10(resource));
                        if stores.node.append(&key, now, full.avg10).is_ok() {
                            summary.samples += 1;
                        }
                    }
                }
                Err(SystemError::Unsupported { .. }) => {
                    tracing::info!("PSI is not available on this kernel; PSI collection is off");
                    self.psi_supported = false;
                    return;
                }
                Err(_) => summary.read_errors += 1,
            }
        }
    }
}
