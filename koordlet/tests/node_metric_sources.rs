//! Where the NodeMetric's host-application, system and NUMA figures come from (tier 2: fake
//! hosts, cgroup v1 and v2): the collector measures the host applications the NodeSLO declares
//! from their cgroups, subtracts them (and the pods) from the system usage, and reads each NUMA
//! node's CPU from the per-CPU lines of `/proc/stat` and its memory from sysfs.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

mod common;

use std::path::Path;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use koord_api::nodeslo::NodeSLOSpec;
use koordlet::metrics::collector::{Collector, Stores};
use koordlet::metrics::{MetricKind, MetricStore, MetricTime, SeriesKey};
use koordlet::states::{PodMeta, Snapshot};
use koordlet::system::numa::page_size;
use koordlet::system::{CgroupDriver, CgroupVersion, Cgroups};
use serde_json::json;

use common::FakeHost;

const APP_DIR: &str = "host-latency-sensitive/nginx";
const KIB: f64 = 1024.0;

fn be_pod() -> PodMeta {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "batch", "namespace": "ns", "uid": common::POD_UID,
                     "labels": {"koordinator.sh/qosClass": "BE"}},
        "spec": {"containers": [{"name": "a"}]},
        "status": {"qosClass": "BestEffort", "phase": "Running", "containerStatuses": [
            {"name": "a", "containerID": common::CONTAINER, "image": "", "imageID": "", "ready": true, "restartCount": 0}]}
    }))
    .unwrap();
    PodMeta::new(Arc::new(pod)).unwrap()
}

fn slo(apps: serde_json::Value) -> Option<Arc<NodeSLOSpec>> {
    Some(Arc::new(
        serde_json::from_value(json!({"hostApplications": apps})).unwrap(),
    ))
}

fn nginx() -> serde_json::Value {
    json!([{"name": "nginx", "priority": "koord-prod", "qos": "LS",
            "cgroupPath": {"base": "CgroupRoot", "parentDir": "host-latency-sensitive/", "relativePath": "nginx/"}}])
}

/// `/proc/stat` with the aggregate line and four CPUs; `busy[i]` user ticks on CPU i.
fn proc_stat(busy: [u64; 4]) -> String {
    let total: u64 = busy.iter().sum();
    let mut text = format!("cpu  {total} 0 0 4000 0 0 0 0 0 0\n");
    for (i, b) in busy.iter().enumerate() {
        text.push_str(&format!("cpu{i} {b} 0 0 1000 0 0 0 0 0 0\n"));
    }
    text.push_str("intr 0\nctxt 0\n");
    text
}

/// Two NUMA nodes: CPUs 0-1 with 400000 kB in use without page cache, CPUs 2-3 with 100000 kB.
fn numa_sysfs(host: &FakeHost) {
    let base = host.roots.sys.join("devices/system/node");
    for (id, cpus, meminfo) in [
        (
            0,
            "0-1",
            "MemTotal: 600000 kB\nMemFree: 100000 kB\nActive(file): 50000 kB\nInactive(file): 40000 kB\nSReclaimable: 10000 kB\n",
        ),
        (1, "2-3", "MemTotal: 400000 kB\nMemFree: 300000 kB\n"),
    ] {
        let dir = base.join(format!("node{id}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("cpulist"), format!("{cpus}\n")).unwrap();
        let lines: String = meminfo.lines().map(|l| format!("Node {id} {l}\n")).collect();
        std::fs::write(dir.join("meminfo"), lines).unwrap();
    }
}

/// A cgroup's `memory.numa_stat` with `pages` anonymous pages on NUMA nodes 0 and 1.
fn numa_stat(host: &FakeHost, rel: &Path, pages: [u64; 2]) {
    let ps = page_size();
    let text = match host.version {
        CgroupVersion::V1 => format!(
            "total={} N0={} N1={}\nhierarchical_anon={} N0={} N1={}\nhierarchical_file=0 N0=0 N1=0\nhierarchical_unevictable=0 N0=0 N1=0\n",
            pages[0] + pages[1],
            pages[0],
            pages[1],
            pages[0] + pages[1],
            pages[0],
            pages[1]
        ),
        CgroupVersion::V2 => format!(
            "anon N0={} N1={}\ninactive_anon N0={} N1={}\nactive_anon N0=0 N1=0\ninactive_file N0=0 N1=0\nactive_file N0=0 N1=0\nunevictable N0=0 N1=0\n",
            pages[0] * ps,
            pages[1] * ps,
            pages[0] * ps,
            pages[1] * ps
        ),
    };
    std::fs::write(host.file("memory", rel, "memory.numa_stat"), text).unwrap();
}

/// Sets a cgroup's cumulative CPU time (in half seconds) and memory usage.
fn usage(host: &FakeHost, rel: &Path, cpu_half_secs: u64, memory: u64) {
    match host.version {
        CgroupVersion::V1 => {
            let ns = cpu_half_secs * 500_000_000;
            std::fs::write(host.file("cpuacct", rel, "cpuacct.usage"), format!("{ns}\n")).unwrap();
            std::fs::write(
                host.file("memory", rel, "memory.usage_in_bytes"),
                format!("{memory}\n"),
            )
            .unwrap();
        }
        CgroupVersion::V2 => {
            let us = cpu_half_secs * 500_000;
            std::fs::write(
                host.file("cpu", rel, "cpu.stat"),
                format!("usage_usec {us}\nnr_periods 0\nnr_throttled 0\nthrottled_usec 0\n"),
            )
            .unwrap();
            std::fs::write(host.file("memory", rel, "memory.current"), format!("{memory}\n")).unwrap();
        }
    }
}

fn latest(store: &MetricStore, kind: MetricKind, object: &str) -> Option<f64> {
    store.latest(&SeriesKey::of(kind, object)).map(|(_, v)| v)
}

#[test]
fn host_applications_are_measured_and_left_out_of_the_system_usage() {
    for version in [CgroupVersion::V1, CgroupVersion::V2] {
        let host = FakeHost::new(version, CgroupDriver::Cgroupfs);
        let pod_dir = host
            .paths
            .pod_dir(koord_api::KubeQoSClass::BestEffort, &common::uid());
        let app_dir = Path::new(APP_DIR);
        host.add_cgroup(app_dir);
        numa_sysfs(&host);
        numa_stat(&host, pod_dir.as_path(), [100, 10]);
        numa_stat(&host, app_dir, [50, 0]);
        std::fs::write(
            host.roots.proc.join("meminfo"),
            "MemTotal: 1000000 kB\nMemFree: 200000 kB\nMemAvailable: 600000 kB\n",
        )
        .unwrap();
        std::fs::write(host.roots.proc.join("stat"), proc_stat([100, 100, 100, 100])).unwrap();
        usage(&host, pod_dir.as_path(), 10, 1 << 20);
        usage(&host, app_dir, 4, 2 << 20);

        let cgroups = Arc::new(Cgroups::detect(&host.roots).unwrap());
        let mut collector = Collector::new(cgroups, host.roots.clone(), host.paths.clone());
        let mut stores = Stores::default();
        let mut snapshot = Snapshot {
            pods: Arc::new(vec![be_pod()]),
            pods_synced: true,
            node_slo: slo(nginx()),
            ..Snapshot::default()
        };
        let t0 = 1_700_000_000_000i64;
        let first = collector.collect(&snapshot, MetricTime(t0), &mut stores);
        assert_eq!(first.read_errors, 0, "{version:?}");
        // The host application's first reading only primes its counter: no system CPU yet
        // (it would count the application as system usage).
        assert_eq!(latest(&stores.node, MetricKind::SysCpuUsage, ""), None);

        // One second later: CPUs 0-1 +100 ticks each, 2-3 +50 each (3 cores in all); the pod
        // used 1 core, the host application 0.5.
        std::fs::write(host.roots.proc.join("stat"), proc_stat([200, 200, 150, 150])).unwrap();
        usage(&host, pod_dir.as_path(), 12, 1 << 20);
        usage(&host, app_dir, 5, 2 << 20);
        let second = collector.collect(&snapshot, MetricTime(t0 + 1000), &mut stores);
        assert_eq!(second.read_errors, 0, "{version:?}");

        let (node, pods) = (&stores.node, &stores.pods);
        assert_eq!(latest(node, MetricKind::NodeCpuUsage, ""), Some(3.0));
        assert_eq!(latest(pods, MetricKind::HostAppCpuUsage, "nginx"), Some(0.5));
        // Working set: usage 2 MiB − inactive_file 3 (the fake memory.stat).
        let app_memory = (2 << 20) as f64 - 3.0;
        let pod_memory = (1 << 20) as f64 - 3.0;
        assert_eq!(
            latest(pods, MetricKind::HostAppMemoryUsage, "nginx"),
            Some(app_memory)
        );
        assert_eq!(latest(node, MetricKind::SysCpuUsage, ""), Some(3.0 - 1.0 - 0.5));
        assert_eq!(
            latest(node, MetricKind::SysMemoryUsage, ""),
            Some(400_000.0 * KIB - pod_memory - app_memory)
        );

        // NUMA: node 0 has CPUs 0-1 (2 cores busy), node 1 CPUs 2-3 (1 core).
        assert_eq!(latest(node, MetricKind::NumaCpuUsage, "0"), Some(2.0));
        assert_eq!(latest(node, MetricKind::NumaCpuUsage, "1"), Some(1.0));
        assert_eq!(
            latest(node, MetricKind::NumaMemoryUsage, "0"),
            Some((600_000.0 - 100_000.0 - 50_000.0 - 40_000.0 - 10_000.0) * KIB)
        );
        assert_eq!(
            latest(node, MetricKind::NumaMemoryUsageWithPageCache, "0"),
            Some(500_000.0 * KIB)
        );
        assert_eq!(
            latest(node, MetricKind::NumaMemoryUsage, "1"),
            Some(100_000.0 * KIB)
        );
        let ps = page_size() as f64;
        assert_eq!(
            latest(node, MetricKind::NumaSysMemoryUsage, "0"),
            Some(400_000.0 * KIB - 150.0 * ps)
        );
        assert_eq!(
            latest(node, MetricKind::NumaSysMemoryUsage, "1"),
            Some(100_000.0 * KIB - 10.0 * ps)
        );

        // The NodeSLO stops declaring the application: its series go.
        snapshot.node_slo = slo(json!([]));
        let third = collector.collect(&snapshot, MetricTime(t0 + 2000), &mut stores);
        assert_eq!(third.dropped_objects, 1);
        assert_eq!(latest(&stores.pods, MetricKind::HostAppCpuUsage, "nginx"), None);
        assert_eq!(
            latest(&stores.pods, MetricKind::HostAppMemoryUsage, "nginx"),
            None
        );
    }
}

#[test]
fn undeclared_unreadable_and_pathless_applications() {
    let host = FakeHost::new(CgroupVersion::V2, CgroupDriver::Cgroupfs);
    std::fs::write(host.roots.proc.join("stat"), proc_stat([1, 1, 1, 1])).unwrap();
    std::fs::write(
        host.roots.proc.join("meminfo"),
        "MemTotal: 1000 kB\nMemFree: 200 kB\nMemAvailable: 600 kB\n",
    )
    .unwrap();
    let cgroups = Arc::new(Cgroups::detect(&host.roots).unwrap());
    let mut collector = Collector::new(cgroups, host.roots.clone(), host.paths.clone());
    let mut stores = Stores::default();
    // No cgroup path: not measured, no error. A path whose cgroup does not exist: one read
    // error per file, nothing stored. No NUMA directory in sysfs: no NUMA series.
    let snapshot = Snapshot {
        pods_synced: true,
        node_slo: slo(json!([
            {"name": "pathless"},
            {"name": "missing", "cgroupPath": {"parentDir": "nowhere"}}
        ])),
        ..Snapshot::default()
    };
    let summary = collector.collect(&snapshot, MetricTime(1000), &mut stores);
    assert_eq!(summary.read_errors, 2);
    assert_eq!(collector.tracked_objects(), 0);
    assert_eq!(
        latest(&stores.pods, MetricKind::HostAppMemoryUsage, "missing"),
        None
    );
    assert_eq!(latest(&stores.node, MetricKind::NumaMemoryUsage, "0"), None);
    // Without a host application rate the system CPU still comes once the node has one.
    std::fs::write(host.roots.proc.join("stat"), proc_stat([101, 1, 1, 1])).unwrap();
    collector.collect(&snapshot, MetricTime(2000), &mut stores);
    assert_eq!(latest(&stores.node, MetricKind::SysCpuUsage, ""), Some(1.0));
}

#[test]
fn the_report_carries_host_applications_numa_usages_and_the_prod_peak() {
    use koord_api::nodemetric::{MemoryCollectPolicy, ReclaimableMetric};
    use koordlet::report::{ReportInput, build_status, resource_map};
    use koordlet::states::NodeMetricSettings;

    let mut stores = Stores::default();
    let t0 = 1_700_000_000_000i64;
    for i in 0..120i64 {
        let t = MetricTime(t0 + i * 1000);
        let put = |store: &mut MetricStore, kind, object: &str, v: f64| {
            store.append(&SeriesKey::of(kind, object), t, v).unwrap();
        };
        put(&mut stores.pods, MetricKind::HostAppCpuUsage, "nginx", 0.25);
        put(&mut stores.pods, MetricKind::HostAppMemoryUsage, "nginx", 3e8);
        // Node 10 first in the store: IDs sort as numbers.
        for (id, cpu) in [("10", 1.0), ("1", 0.5)] {
            put(&mut stores.node, MetricKind::NumaCpuUsage, id, cpu);
            put(&mut stores.node, MetricKind::NumaMemoryUsage, id, 2e9);
            put(
                &mut stores.node,
                MetricKind::NumaMemoryUsageWithPageCache,
                id,
                5e9,
            );
            put(&mut stores.node, MetricKind::NumaSysMemoryUsage, id, 1e9);
        }
    }
    let apps: Vec<koord_api::nodeslo::HostApplicationSpec> = serde_json::from_value(json!([
        {"name": "nginx", "priority": "koord-prod", "qos": "LS"},
        {"name": "nginx", "priority": "koord-batch"},
        {"name": "idle", "priority": "koord-batch", "qos": "BE"}
    ]))
    .unwrap();
    let peak = ReclaimableMetric {
        resource: resource_map(Some(1.5), Some(2e9)),
    };
    let settings = NodeMetricSettings::default();
    let with_cache = NodeMetricSettings {
        memory_policy: MemoryCollectPolicy::UsageWithPageCache,
        ..NodeMetricSettings::default()
    };
    let now = MetricTime(t0 + 119 * 1000);
    let input = ReportInput {
        node_store: &stores.node,
        pod_store: &stores.pods,
        pods: &[],
        host_applications: &apps,
        settings: &settings,
        now,
        prod_reclaimable: None,
        prod_peak: Some(&peak),
    };
    let status = build_status(&input);
    // One entry per declared name with samples (the first declaration's classes); "idle" has
    // none and is left out.
    let hosts = status.host_application_metric.unwrap();
    assert_eq!(hosts.len(), 1);
    assert_eq!(hosts[0].name, "nginx");
    assert_eq!(hosts[0].priority.as_deref(), Some("koord-prod"));
    assert_eq!(hosts[0].qos.as_deref(), Some("LS"));
    assert_eq!(hosts[0].usage.resources["cpu"].0, "250m");
    assert_eq!(hosts[0].usage.resources["memory"].0, "300000000");
    let numa = status.node_metric.unwrap().numa_usages.unwrap();
    assert_eq!(
        numa.iter().map(|n| n.numa_node_id).collect::<Vec<_>>(),
        vec![1, 10]
    );
    assert_eq!(numa[0].node_usage.resources["cpu"].0, "500m");
    assert_eq!(numa[0].node_usage.resources["memory"].0, "2000000000");
    assert_eq!(numa[0].system_usage.resources["memory"].0, "1000000000");
    assert!(!numa[0].system_usage.resources.contains_key("cpu"));
    assert_eq!(status.prod_peak_metric, Some(peak.clone()));

    // With page cache the NUMA memory follows the policy; nothing declared, nothing measured:
    // empty lists (which replace older ones in the status) rather than absent fields.
    let empty = Stores::default();
    let status = build_status(&ReportInput {
        settings: &with_cache,
        ..input
    });
    let numa = status.node_metric.unwrap().numa_usages.unwrap();
    assert_eq!(numa[1].node_usage.resources["memory"].0, "5000000000");
    let status = build_status(&ReportInput {
        node_store: &empty.node,
        pod_store: &empty.pods,
        host_applications: &[],
        prod_peak: None,
        ..input
    });
    assert_eq!(status.host_application_metric, Some(vec![]));
    assert_eq!(status.node_metric.unwrap().numa_usages, Some(vec![]));
    assert_eq!(status.prod_peak_metric, None);
}
