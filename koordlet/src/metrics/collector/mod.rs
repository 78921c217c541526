//! Collectors: one round reads `/proc/stat`, `/proc/meminfo`, the NUMA nodes' sysfs files,
//! every pod's, container's and host application's CPU and memory cgroup files and the node's
//! PSI, and appends samples to the stores.
//!
//! CPU is a rate: the round keeps the previous cumulative counter of each object and stores
//! `Δns / Δwall` (cores); the first round of an object only primes it. Memory follows the
//! NodeMetric memory collect policy: node `MemTotal − MemAvailable` (or `− MemFree` with page
//! cache); pods, containers and host applications `usage − inactive_file` (working set; the
//! whole usage with page cache). Derived per round: BE totals (usage, batch-cpu requests) and
//! the system usage `max(node − Σ pods − Σ host applications, 0)`, as upstream; per NUMA node
//! the system memory likewise ([`numa`]).
//!
//! Memory stays flat whatever the pod churn: the collector tracks only objects seen in this
//! round, and the series of pods, containers and host applications that vanished are dropped
//! from the store.
//!
//! Cost per round: three small-file reads per pod and per container (CPU usage, memory usage,
//! and `memory.stat` unless page cache counts), plus `memory.numa_stat` per pod on a host with
//! NUMA nodes in sysfs, and two small files per NUMA node. Each object's files are resolved and
//! probed once and kept open within the fd budget (a read is one `pread`, see
//! [`crate::system::cgroup_file`]), read through one reused buffer; series are appended by
//! borrowed name, and a BE pod's batch-cpu request is parsed again only when the pod object
//! changes, so a round allocates only for objects it has not seen before and for the few
//! NUMA node files (read whole each round, so CPU hotplug and memory changes are followed).

mod host_apps;
mod numa;
mod slots;

use koord_api::KubeQoSClass;
use std::collections::{HashMap, HashSet};
use std::fmt::Write;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use koord_api::QoSClass;
use koord_api::nodemetric::MemoryCollectPolicy;
use koord_api::resources::container_amounts;

use super::{MetricKind, MetricStore, MetricTime, PsiResource, SeriesKey};
use crate::states::Snapshot;
use crate::system::meminfo::Meminfo;
use crate::system::proc_stat::{CpuTicks, ProcStat, USER_HZ, cpu_usage_cores};
use crate::system::psi::{NodePressure, PsiStats};
use crate::system::{Cgroups, KubeCgroupPaths, SystemError, SystemRoots};
use host_apps::{HostAppCollector, HostAppRound};
use numa::NumaCollector;
use slots::CgroupSlots;

/// The two stores a collector fills: node-level series (long windows) and per-pod/container
/// series (short windows, many objects).
#[derive(Debug)]
pub struct Stores {
    /// Node, NUMA node, system, BE and PSI series.
    pub node: MetricStore,
    /// Pod, container and host application series.
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

/// One pod or container the collector follows: its files and its BE batch-cpu request.
#[derive(Debug)]
struct Tracked {
    /// The last round in which the object was in the snapshot.
    round: u64,
    /// The pod's Kubernetes QoS the files were resolved for (it decides the cgroup parent).
    kube_qos: KubeQoSClass,
    slots: CgroupSlots,
    /// A BE pod's summed `batch-cpu` requests (milli-cores) and the pod object they were
    /// computed from: recomputed only when the snapshot holds a different object (an update).
    batch_cpu_request: Option<(Arc<Pod>, i64)>,
}

impl Tracked {
    fn new(kube_qos: KubeQoSClass) -> Self {
        Tracked {
            round: 0,
            kube_qos,
            slots: CgroupSlots::default(),
            batch_cpu_request: None,
        }
    }

    /// Marks the object seen in `round`; a changed QoS moves its cgroup, so files are resolved
    /// again.
    fn visit(&mut self, round: u64, kube_qos: KubeQoSClass) {
        self.round = round;
        if self.kube_qos != kube_qos {
            *self = Tracked {
                round,
                ..Tracked::new(kube_qos)
            };
        }
    }
}

/// Appends one sample, counting it in `summary` when the store takes it.
fn append(
    store: &mut MetricStore,
    kind: MetricKind,
    object: &str,
    now: MetricTime,
    value: f64,
    summary: &mut RoundSummary,
) {
    if store.append_to(kind, object, now, value).is_ok() {
        summary.samples += 1;
    }
}

/// Collector state between rounds.
#[derive(Debug)]
pub struct Collector {
    cgroups: std::sync::Arc<Cgroups>,
    roots: SystemRoots,
    paths: KubeCgroupPaths,
    prev_node: Option<(MetricTime, CpuTicks)>,
    /// Pods (by UID) and containers (by ID) seen in the last round.
    objects: HashMap<Box<str>, Tracked>,
    round: u64,
    /// Read buffer reused by every file read.
    buf: Vec<u8>,
    psi_supported: bool,
    numa: NumaCollector,
    host_apps: HostAppCollector,
}

impl Collector {
    /// A collector reading through `cgroups` and the proc root of `roots`.
    pub fn new(cgroups: std::sync::Arc<Cgroups>, roots: SystemRoots, paths: KubeCgroupPaths) -> Self {
        Collector {
            cgroups,
            roots,
            paths,
            prev_node: None,
            objects: HashMap::new(),
            round: 0,
            buf: Vec::new(),
            psi_supported: true,
            numa: NumaCollector::default(),
            host_apps: HostAppCollector::default(),
        }
    }

    /// Objects whose previous CPU counter is held (bounded by the pods and host applications
    /// of the last round).
    pub fn tracked_objects(&self) -> usize {
        self.objects
            .values()
            .filter(|t| t.slots.has_cpu_counter())
            .count()
            + self.host_apps.tracked()
    }

    /// One collection round at `now` over the snapshot's pods and the NodeSLO's host
    /// applications.
    pub fn collect(&mut self, snapshot: &Snapshot, now: MetricTime, stores: &mut Stores) -> RoundSummary {
        let mut summary = RoundSummary::default();
        let node_store = &mut stores.node;
        let policy = snapshot.node_metric.memory_policy;

        // Node CPU and memory, then the NUMA nodes.
        let mut node_cpu = None;
        let stat = match ProcStat::read(&self.roots) {
            Ok(stat) => {
                if let Some((t, prev)) = self.prev_node {
                    let secs = (now.as_millis() - t.as_millis()) as f64 / 1000.0;
                    node_cpu = cpu_usage_cores(&prev, &stat.total, secs, USER_HZ);
                }
                self.prev_node = Some((now, stat.total));
                Some(stat)
            }
            Err(_) => {
                summary.read_errors += 1;
                None
            }
        };
        if let Some(c) = node_cpu {
            append(node_store, MetricKind::NodeCpuUsage, "", now, c, &mut summary);
        }
        let mut node_memory = None;
        match Meminfo::read(&self.roots) {
            Ok(info) => {
                let without = info.mem_total.saturating_sub(info.mem_available) as f64;
                let with = info.mem_total.saturating_sub(info.mem_free) as f64;
                append(
                    node_store,
                    MetricKind::NodeMemoryUsage,
                    "",
                    now,
                    without,
                    &mut summary,
                );
                append(
                    node_store,
                    MetricKind::NodeMemoryUsageWithPageCache,
                    "",
                    now,
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
        let mut numa =
            self.numa
                .collect_nodes(&self.roots, stat.as_ref(), now, policy, node_store, &mut summary);

        // Pods and containers.
        self.round += 1;
        let round = self.round;
        let Collector {
            cgroups,
            paths,
            objects,
            buf,
            host_apps,
            ..
        } = self;
        let cgroups: &Cgroups = cgroups;
        let paths: &KubeCgroupPaths = paths;
        let pod_store = &mut stores.pods;
        let mut container_name = String::new();
        let (mut pods_cpu, mut pods_memory, mut pods_cpu_complete) = (0.0, 0.0, true);
        let (mut be_cpu, mut be_request_milli) = (0.0, 0i64);
        for pod in snapshot.pods.iter().filter(|p| p.is_running()) {
            let uid = pod.uid.as_str();
            let is_be = pod.qos == QoSClass::Be;
            let Some(tracked) = visit(objects, uid, round, pod.kube_qos) else {
                continue;
            };
            let dir = || pod.cgroup_dir(paths);
            match tracked.slots.read_cpu(cgroups, &dir, buf, now) {
                Ok(Some(cores)) => {
                    append(pod_store, MetricKind::PodCpuUsage, uid, now, cores, &mut summary);
                    pods_cpu += cores;
                    if is_be {
                        be_cpu += cores;
                    }
                }
                Ok(None) => pods_cpu_complete = false,
                Err(_) => summary.read_errors += 1,
            }
            match tracked.slots.read_memory(cgroups, &dir, buf, policy) {
                Ok(bytes) => {
                    append(
                        pod_store,
                        MetricKind::PodMemoryUsage,
                        uid,
                        now,
                        bytes,
                        &mut summary,
                    );
                    pods_memory += bytes;
                }
                Err(_) => summary.read_errors += 1,
            }
            if let Some(numa) = numa.as_mut()
                && tracked
                    .slots
                    .add_numa_memory(cgroups, &dir, buf, policy, &numa.ids, &mut numa.cgroups)
                    .is_err()
            {
                summary.read_errors += 1;
            }
            if is_be {
                let milli = match &tracked.batch_cpu_request {
                    Some((seen, milli)) if Arc::ptr_eq(seen, &pod.pod) => *milli,
                    _ => {
                        let milli = batch_cpu_request_milli(&pod.pod);
                        tracked.batch_cpu_request = Some((Arc::clone(&pod.pod), milli));
                        milli
                    }
                };
                be_request_milli = be_request_milli.saturating_add(milli);
            }
            for container in &pod.containers {
                let Some(id) = &container.id else {
                    continue;
                };
                container_name.clear();
                // Writing into a String cannot fail.
                let _ = write!(container_name, "{id}");
                let object = container_name.as_str();
                let Some(tracked) = visit(objects, object, round, pod.kube_qos) else {
                    continue;
                };
                let dir = || paths.container_dir(pod.kube_qos, &pod.uid, id);
                match tracked.slots.read_cpu(cgroups, &dir, buf, now) {
                    Ok(Some(cores)) => append(
                        pod_store,
                        MetricKind::ContainerCpuUsage,
                        object,
                        now,
                        cores,
                        &mut summary,
                    ),
                    Ok(None) => {}
                    Err(_) => summary.read_errors += 1,
                }
                match tracked.slots.read_memory(cgroups, &dir, buf, policy) {
                    Ok(bytes) => append(
                        pod_store,
                        MetricKind::ContainerMemoryUsage,
                        object,
                        now,
                        bytes,
                        &mut summary,
                    ),
                    Err(_) => summary.read_errors += 1,
                }
            }
        }
        let mut gone = HashSet::new();
        objects.retain(|name, tracked| {
            let seen = tracked.round == round;
            if !seen {
                gone.insert(name.clone());
            }
            seen
        });
        pod_store.remove_objects(&gone);
        summary.dropped_objects += gone.len();

        // Host applications.
        let apps = snapshot
            .node_slo
            .as_deref()
            .and_then(|slo| slo.host_applications.as_deref())
            .unwrap_or(&[]);
        let hosts = host_apps.collect(
            apps,
            HostAppRound {
                cgroups,
                paths,
                buf,
                now,
                policy,
            },
            numa.as_mut(),
            pod_store,
            &mut summary,
        );

        // Derived series.
        append(node_store, MetricKind::BeCpuUsage, "", now, be_cpu, &mut summary);
        let be_request = be_request_milli as f64 / 1000.0;
        append(
            node_store,
            MetricKind::BeCpuRequest,
            "",
            now,
            be_request,
            &mut summary,
        );
        if let (Some(node), true, true) = (node_cpu, pods_cpu_complete, hosts.cpu_complete) {
            let system = (node - pods_cpu - hosts.cpu).max(0.0);
            append(node_store, MetricKind::SysCpuUsage, "", now, system, &mut summary);
        }
        if let Some(node) = node_memory {
            let system = (node - pods_memory - hosts.memory).max(0.0);
            append(
                node_store,
                MetricKind::SysMemoryUsage,
                "",
                now,
                system,
                &mut summary,
            );
        }
        if let Some(numa) = &numa {
            numa.append_system(now, node_store, &mut summary);
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

/// Σ `batch-cpu` requests of the pod's containers, in milli-cores.
fn batch_cpu_request_milli(pod: &Pod) -> i64 {
    pod.spec.as_ref().map_or(0, |spec| {
        spec.containers
            .iter()
            .filter_map(|c| container_amounts(c).ok()?.batch_cpu_request())
            .fold(0, i64::saturating_add)
    })
}

/// The object's entry, created on first sight and marked seen in `round`.
fn visit<'m>(
    objects: &'m mut HashMap<Box<str>, Tracked>,
    name: &str,
    round: u64,
    kube_qos: KubeQoSClass,
) -> Option<&'m mut Tracked> {
    if !objects.contains_key(name) {
        objects.insert(name.into(), Tracked::new(kube_qos));
    }
    let tracked = objects.get_mut(name)?;
    tracked.visit(round, kube_qos);
    Some(tracked)
}
