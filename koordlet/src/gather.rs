//! Gatherers: build the strategy engine's input ([`koordlet_core::strategies::engine`]) at the edges.
//!
//! - [`read_cgroup_facts`]: current values of the files the engine asks for (live loop and
//!   `plan --cgroup-root`).
//! - [`live_usage`]: usage from the metric stores (latest values of the node, pods, containers
//!   and host applications, and the windowed BE averages).
//! - [`read_topology`]: the CPU topology from sysfs.
//! - [`memory_qos_kernel`]: whether the kernel has the memory QoS files.
//!
//! The offline gatherer (from `plan`'s YAML) lives in [`crate::plan`].

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Duration;

use koord_api::nodeslo::HostApplicationSpec;

use crate::metrics::collector::Stores;
use crate::metrics::{MetricKind, MetricTime, SeriesKey};
use crate::states::PodMeta;
use crate::system::cgroup_stats::CpuThrottling;
use crate::system::{CgroupDir, CgroupResource, CgroupValue, Cgroups, KubeCgroupPaths};
pub use koordlet_core::paths::{host_app_dir, host_app_is_be};
use koordlet_core::strategies::cpuset::{CpuInfo, CpuList};
use koordlet_core::strategies::engine::{BeCpuUsage, CgroupFacts, HostAppUsage, PodUsage, UsageFacts};
use koordlet_core::strategies::memory_qos::MemoryQosKernel;

/// Whether this node has the memory QoS files: every cgroup v2 kernel does; on v1 only an
/// Anolis kernel has `memory.min` (probed in the kubepods directory, cached by `cgroups`).
pub fn memory_qos_kernel(cgroups: &Cgroups, paths: &KubeCgroupPaths) -> MemoryQosKernel {
    match cgroups.version() {
        crate::system::CgroupVersion::V2 => MemoryQosKernel::CgroupV2,
        crate::system::CgroupVersion::V1 => {
            match cgroups.is_supported(CgroupResource::MemoryMin, &paths.kubepods_dir()) {
                Ok(true) => MemoryQosKernel::AnolisV1,
                _ => MemoryQosKernel::Absent,
            }
        }
    }
}

/// Reads every `(dir, file)` of `reads` (unreadable files stay absent: the strategies treat
/// them as unknown). With `throttling`, also reads `cpu.stat` of the burstable container
/// directories among `reads` and fills throttled ratios against the previous readings it keeps.
pub fn read_cgroup_facts(
    cgroups: &Cgroups,
    reads: &[(String, &'static str)],
    throttling: Option<&mut HashMap<String, CpuThrottling>>,
) -> CgroupFacts {
    let mut facts = CgroupFacts::default();
    for (dir, file) in reads {
        let (Some(resource), Ok(cdir)) = (CgroupResource::from_name(file), CgroupDir::new(dir)) else {
            continue;
        };
        match cgroups.read(resource, &cdir) {
            Ok(CgroupValue::Int(v)) => {
                facts.ints.insert((dir.clone(), *file), v);
            }
            Ok(CgroupValue::Cpus(set)) => {
                facts.cpusets.insert(dir.clone(), set);
            }
            Err(_) => {}
        }
    }
    if let Some(previous) = throttling {
        let mut next = HashMap::new();
        for (dir, file) in reads {
            // Burstable dirs are the ones read for their burst.
            if *file != koordlet_core::strategies::FILE_CFS_BURST {
                continue;
            }
            let Ok(cdir) = CgroupDir::new(dir) else { continue };
            if let Ok(now) = cgroups.cpu_throttling(&cdir) {
                if let Some(before) = previous.get(dir) {
                    facts
                        .throttled
                        .insert(dir.clone(), now.throttled_ratio_since(before));
                }
                next.insert(dir.clone(), now);
            }
        }
        *previous = next;
    }
    facts
}

/// Usage from the metric stores at `now`: latest values (at most `stale` old) of the node, the
/// pods and their containers and the NodeSLO's host applications (as the collector measured
/// them), and the BE averages over `be_window`.
pub fn live_usage(
    stores: &Stores,
    pods: &[PodMeta],
    host_applications: &[HostApplicationSpec],
    now: MetricTime,
    stale: Duration,
    be_window: Duration,
) -> UsageFacts {
    let fresh = now.minus(stale);
    let latest_node = |kind| {
        stores
            .node
            .latest(&SeriesKey::node(kind))
            .filter(|(t, v)| *t >= fresh && v.is_finite())
            .map(|(_, v)| v)
    };
    let latest_pod = |kind, object: &str| {
        stores
            .pods
            .latest(&SeriesKey::of(kind, object))
            .filter(|(t, v)| *t >= fresh && v.is_finite())
            .map(|(_, v)| v)
    };
    let mut usage = UsageFacts {
        node_cpu_milli: latest_node(MetricKind::NodeCpuUsage).map(|c| c * 1000.0),
        node_memory_bytes: latest_node(MetricKind::NodeMemoryUsage).map(|m| m.max(0.0) as u64),
        ..UsageFacts::default()
    };
    let mut pods_map = BTreeMap::new();
    for p in pods {
        let uid = p.uid.as_str();
        pods_map.insert(
            uid.to_owned(),
            PodUsage {
                cpu_milli: latest_pod(MetricKind::PodCpuUsage, uid).map(|c| c * 1000.0),
                memory_bytes: latest_pod(MetricKind::PodMemoryUsage, uid).map(|m| m.max(0.0) as u64),
            },
        );
        for c in &p.containers {
            let Some(id) = &c.id else { continue };
            let id = id.to_string();
            if let Some(cpu) = latest_pod(MetricKind::ContainerCpuUsage, &id) {
                usage.containers.insert(id, cpu * 1000.0);
            }
        }
    }
    usage.pods = pods_map;
    usage.host_apps = host_applications
        .iter()
        .filter_map(|app| {
            Some(HostAppUsage {
                name: app.name.clone(),
                be: host_app_is_be(app),
                cpu_milli: latest_pod(MetricKind::HostAppCpuUsage, &app.name)? * 1000.0,
            })
        })
        .collect();
    let start = now.minus(be_window);
    let window = |kind| stores.node.window(&SeriesKey::node(kind), start, now);
    if let (Some(u), Some(r)) = (window(MetricKind::BeCpuUsage), window(MetricKind::BeCpuRequest)) {
        usage.be_window = Some((
            BeCpuUsage {
                usage_milli: u.avg * 1000.0,
                request_milli: r.avg * 1000.0,
            },
            u32::try_from(u.count.min(r.count)).unwrap_or(u32::MAX),
        ));
        usage.be_latest = Some(BeCpuUsage {
            usage_milli: u.latest * 1000.0,
            request_milli: r.latest * 1000.0,
        });
    }
    usage
}

fn read_u32(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The CPU topology under `sys_root` (`devices/system/cpu/cpuN/topology`, NUMA nodes from
/// `devices/system/node/nodeN/cpulist`); empty when unreadable (the engine then assumes one
/// core per CPU on one NUMA node).
pub fn read_topology(sys_root: &Path) -> Vec<CpuInfo> {
    let cpu_dir = sys_root.join("devices/system/cpu");
    let online = std::fs::read_to_string(cpu_dir.join("online"))
        .ok()
        .and_then(|t| CpuList::parse(t.trim()).ok());
    let Some(online) = online else { return Vec::new() };
    let mut numa: BTreeMap<u32, u32> = BTreeMap::new();
    if let Ok(entries) = std::fs::read_dir(sys_root.join("devices/system/node")) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(id) = name.strip_prefix("node").and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            if let Some(list) = std::fs::read_to_string(entry.path().join("cpulist"))
                .ok()
                .and_then(|t| CpuList::parse(t.trim()).ok())
            {
                for cpu in list.iter() {
                    numa.insert(cpu, id);
                }
            }
        }
    }
    online
        .iter()
        .map(|cpu| {
            let topo = cpu_dir.join(format!("cpu{cpu}/topology"));
            CpuInfo {
                cpu,
                core: read_u32(&topo.join("core_id")).unwrap_or(cpu),
                socket: read_u32(&topo.join("physical_package_id")).unwrap_or(0),
                node: numa.get(&cpu).copied().unwrap_or(0),
            }
        })
        .collect()
}
