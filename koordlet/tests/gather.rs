//! The live gatherers on fake trees: cgroup values the engine asks for (v1 and v2), throttled
//! ratios from two `cpu.stat` readings, the CPU topology from a fake sysfs.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

mod common;

use koord_api::KubeQoSClass;
use std::collections::HashMap;
use std::path::Path;

use koordlet::gather::{read_cgroup_facts, read_topology};
use koordlet::system::{CgroupDriver, CgroupVersion, Cgroups};
use koordlet_core::strategies::cpuset::{CpuInfo, CpuList};

#[test]
fn cgroup_facts_in_v1_units_on_both_versions() {
    for version in [CgroupVersion::V1, CgroupVersion::V2] {
        let host = common::FakeHost::new(version, CgroupDriver::Cgroupfs);
        let cgroups = Cgroups::detect(&host.roots).unwrap();
        let be = host.paths.qos_dir(KubeQoSClass::BestEffort);
        let pod = host.paths.pod_dir(KubeQoSClass::Burstable, &common::uid());
        match version {
            CgroupVersion::V1 => {
                std::fs::write(host.file("cpu", be.as_path(), "cpu.cfs_quota_us"), "50000\n").unwrap();
                std::fs::write(host.file("cpuset", be.as_path(), "cpuset.cpus"), "0-1\n").unwrap();
            }
            CgroupVersion::V2 => {
                std::fs::write(host.file("", be.as_path(), "cpu.max"), "50000 100000\n").unwrap();
                std::fs::write(host.file("", be.as_path(), "cpuset.cpus"), "0-1\n").unwrap();
            }
        }
        let reads = vec![
            (be.to_string(), "cpu.cfs_quota_us"),
            (be.to_string(), "cpuset.cpus"),
            (pod.to_string(), "cpu.cfs_quota_us"),
            (pod.to_string(), "cpu.cfs_burst_us"),
            ("kubepods/no-such-pod".to_string(), "cpu.cfs_quota_us"),
        ];
        let facts = read_cgroup_facts(&cgroups, &reads, None);
        assert_eq!(
            facts.int(&be.to_string(), "cpu.cfs_quota_us"),
            Some(50_000),
            "{version:?}"
        );
        assert_eq!(
            facts.cpusets.get(&be.to_string()),
            Some(&CpuList::parse("0-1").unwrap())
        );
        assert_eq!(
            facts.int(&pod.to_string(), "cpu.cfs_quota_us"),
            Some(-1),
            "{version:?}"
        );
        assert_eq!(
            facts.int(&pod.to_string(), "cpu.cfs_burst_us"),
            Some(0),
            "{version:?}"
        );
        assert_eq!(facts.int("kubepods/no-such-pod", "cpu.cfs_quota_us"), None);
    }
}

#[test]
fn throttled_ratio_from_two_rounds() {
    let host = common::FakeHost::new(CgroupVersion::V1, CgroupDriver::Cgroupfs);
    let cgroups = Cgroups::detect(&host.roots).unwrap();
    let dir = host
        .paths
        .container_dir(KubeQoSClass::Burstable, &common::uid(), &common::cid());
    let stat = host.file("cpu", dir.as_path(), "cpu.stat");
    let reads = vec![(dir.to_string(), "cpu.cfs_burst_us")];
    let mut previous = HashMap::new();
    std::fs::write(&stat, "nr_periods 100\nnr_throttled 10\nthrottled_time 0\n").unwrap();
    let first = read_cgroup_facts(&cgroups, &reads, Some(&mut previous));
    assert!(first.throttled.is_empty(), "no ratio from one reading");
    std::fs::write(&stat, "nr_periods 200\nnr_throttled 35\nthrottled_time 5\n").unwrap();
    let second = read_cgroup_facts(&cgroups, &reads, Some(&mut previous));
    assert_eq!(second.throttled.get(&dir.to_string()), Some(&0.25));
}

#[test]
fn topology_from_sysfs_and_empty_when_unreadable() {
    let dir = tempfile::tempdir().unwrap();
    let sys = dir.path();
    let cpu = sys.join("devices/system/cpu");
    std::fs::create_dir_all(&cpu).unwrap();
    std::fs::write(cpu.join("online"), "0-3\n").unwrap();
    for (n, core, socket) in [(0, 0, 0), (1, 1, 0), (2, 0, 0), (3, 1, 0)] {
        let t = cpu.join(format!("cpu{n}/topology"));
        std::fs::create_dir_all(&t).unwrap();
        std::fs::write(t.join("core_id"), format!("{core}\n")).unwrap();
        std::fs::write(t.join("physical_package_id"), format!("{socket}\n")).unwrap();
    }
    for (node, list) in [(0, "0-1"), (1, "2-3")] {
        let n = sys.join(format!("devices/system/node/node{node}"));
        std::fs::create_dir_all(&n).unwrap();
        std::fs::write(n.join("cpulist"), list).unwrap();
    }
    let topo = read_topology(sys);
    assert_eq!(
        topo[2],
        CpuInfo {
            cpu: 2,
            core: 0,
            socket: 0,
            node: 1
        }
    );
    assert_eq!(topo.len(), 4);
    assert!(read_topology(Path::new("/nonexistent-koord")).is_empty());
}

#[test]
fn host_application_cpu_from_the_collectors_series() {
    use koord_api::nodeslo::HostApplicationSpec;
    use koordlet::gather::{host_app_dir, host_app_is_be, live_usage};
    use koordlet::metrics::MetricTime;
    use koordlet::metrics::collector::{Collector, Stores};
    use koordlet::states::Snapshot;
    use std::sync::Arc;
    use std::time::Duration;

    let host = common::FakeHost::new(CgroupVersion::V1, CgroupDriver::Cgroupfs);
    let cgroups = Arc::new(Cgroups::detect(&host.roots).unwrap());
    let app = |v: serde_json::Value| -> HostApplicationSpec { serde_json::from_value(v).unwrap() };
    let apps = vec![
        app(serde_json::json!({"name": "nginx", "qos": "LS",
            "cgroupPath": {"base": "CgroupRoot", "parentDir": "host-latency-sensitive", "relativePath": "nginx/"}})),
        app(serde_json::json!({"name": "batch", "qos": "BE",
            "cgroupPath": {"base": "KubepodsBesteffort", "relativePath": "batch-agent"}})),
        app(serde_json::json!({"name": "no-path", "qos": "LS"})),
        app(serde_json::json!({"name": "escape", "qos": "LS", "cgroupPath": {"relativePath": "../x"}})),
    ];
    assert_eq!(
        host_app_dir(&apps[0], &host.paths).unwrap().to_string(),
        "host-latency-sensitive/nginx"
    );
    assert_eq!(
        host_app_dir(&apps[1], &host.paths).unwrap().to_string(),
        "kubepods/besteffort/batch-agent"
    );
    assert!(host_app_dir(&apps[2], &host.paths).is_none());
    assert!(host_app_dir(&apps[3], &host.paths).is_none());
    assert!(!host_app_is_be(&apps[0]) && host_app_is_be(&apps[1]));
    for dir in ["host-latency-sensitive/nginx", "kubepods/besteffort/batch-agent"] {
        host.add_cgroup(Path::new(dir));
    }
    let set = |ms: [u64; 2]| {
        for (dir, v) in ["host-latency-sensitive/nginx", "kubepods/besteffort/batch-agent"]
            .iter()
            .zip(ms)
        {
            let f = host.file("cpuacct", Path::new(dir), "cpuacct.usage");
            std::fs::write(f, format!("{}\n", v * 1_000_000)).unwrap();
        }
    };
    std::fs::write(host.roots.proc.join("stat"), "cpu  100 0 100 1000 0 0 0 0 0 0\n").unwrap();
    let mut collector = Collector::new(cgroups, host.roots.clone(), host.paths.clone());
    let mut stores = Stores::default();
    let snapshot = Snapshot {
        pods_synced: true,
        node_slo: Some(Arc::new(
            serde_json::from_value(serde_json::json!({"hostApplications": apps})).unwrap(),
        )),
        ..Snapshot::default()
    };
    let usage = |stores: &Stores, now: i64| {
        live_usage(
            stores,
            &[],
            &apps,
            MetricTime(now),
            Duration::from_secs(3),
            Duration::from_secs(60),
        )
    };
    set([1000, 0]);
    collector.collect(&snapshot, MetricTime(1_000), &mut stores);
    assert!(
        usage(&stores, 1_000).host_apps.is_empty(),
        "first reading only primes"
    );
    // One second later: nginx used 1500 ms of CPU, batch 250 ms.
    set([2500, 250]);
    collector.collect(&snapshot, MetricTime(2_000), &mut stores);
    let got: Vec<_> = usage(&stores, 2_000)
        .host_apps
        .iter()
        .map(|h| (h.name.clone(), h.be, h.cpu_milli.round() as i64))
        .collect();
    assert_eq!(
        got,
        vec![
            ("nginx".to_string(), false, 1500),
            ("batch".to_string(), true, 250)
        ]
    );
    // Stale after three intervals without a sample.
    assert!(usage(&stores, 6_000).host_apps.is_empty());
}
