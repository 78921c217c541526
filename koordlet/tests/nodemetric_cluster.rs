//! Embedded cluster (tier 4): koordlet on a fake host (cgroup v2, fake `/proc` and sysfs with
//! two NUMA nodes) reports a NodeMetric whose `hostApplicationMetric` carries the host
//! application the NodeSLO declares (measured from its cgroup), whose `systemUsage` leaves that
//! application out, and whose `nodeMetric.numaUsages` has one entry per NUMA node. When the
//! NodeSLO stops declaring the application, the next report clears it.
//!
//! CPU counters advance from a thread (node: CPUs 0-1 at 0.75 core each, CPUs 2-3 at 0.25; the
//! application 0.5 core), so CPU figures are checked within a tolerance; memory figures are
//! fixed and checked exactly.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

mod common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::Parser;
use koord_api::nodemetric::{NodeMetricStatus, ResourceMap};
use koord_api::nodeslo::NodeSLO;
use koord_test_support::poll::wait_for;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use common::FakeHost;
use common::cluster::{cluster_with_namespace, unique};
use koordlet::system::{CgroupDriver, CgroupVersion};

const APP_DIR: &str = "host-latency-sensitive/nginx";
const KIB: i64 = 1024;
const MIB: i64 = 1024 * 1024;
/// The application's `memory.current`; its working set is 3 bytes less (the fake
/// `memory.stat`'s `inactive_file`).
const APP_MEMORY: i64 = 512 * MIB;
/// Of which on NUMA node 0 (all anonymous).
const APP_NUMA0: i64 = 100 * MIB;

/// Writes a file whole: to a temporary name, then renamed over the old one, so a concurrent
/// reader sees the old or the new content, never a torn one.
fn replace(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn fake_host() -> FakeHost {
    let host = FakeHost::new(CgroupVersion::V2, CgroupDriver::Cgroupfs);
    replace(
        &host.roots.proc.join("meminfo"),
        "MemTotal: 8000000 kB\nMemFree: 1000000 kB\nMemAvailable: 6000000 kB\n",
    );
    let nodes = host.roots.sys.join("devices/system/node");
    for (id, cpus, total, free) in [(0, "0-1", 4_000_000, 1_000_000), (1, "2-3", 4_000_000, 3_000_000)] {
        let dir = nodes.join(format!("node{id}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("cpulist"), format!("{cpus}\n")).unwrap();
        std::fs::write(
            dir.join("meminfo"),
            format!("Node {id} MemTotal: {total} kB\nNode {id} MemFree: {free} kB\n"),
        )
        .unwrap();
    }
    let app = Path::new(APP_DIR);
    host.add_cgroup(app);
    replace(&host.file("", app, "memory.current"), &format!("{APP_MEMORY}\n"));
    replace(
        &host.file("", app, "memory.numa_stat"),
        &format!(
            "anon N0={APP_NUMA0} N1=0\ninactive_anon N0={APP_NUMA0} N1=0\nactive_anon N0=0 N1=0\n\
inactive_file N0=0 N1=0\nactive_file N0=0 N1=0\nunevictable N0=0 N1=0\n"
        ),
    );
    host
}

/// Advances the CPU counters every 200 ms until `stop`: `/proc/stat` (CPUs 0-1 +15 ticks, 2-3
/// +5) and the application's `cpu.stat` (+100 ms).
fn tick(host: &FakeHost, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    let stat = host.roots.proc.join("stat");
    let app_stat = host.file("", Path::new(APP_DIR), "cpu.stat");
    let write = move |step: u64| {
        let busy = [15 * step, 15 * step, 5 * step, 5 * step];
        let total: u64 = busy.iter().sum();
        let mut text = format!("cpu  {total} 0 0 100 0 0 0 0 0 0\n");
        for (i, b) in busy.iter().enumerate() {
            text.push_str(&format!("cpu{i} {b} 0 0 25 0 0 0 0 0 0\n"));
        }
        replace(&stat, &text);
        replace(
            &app_stat,
            &format!(
                "usage_usec {}\nnr_periods 0\nnr_throttled 0\nthrottled_usec 0\n",
                100_000 * step
            ),
        );
    };
    write(0);
    std::thread::spawn(move || {
        let mut step = 0;
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(200));
            step += 1;
            write(step);
        }
    })
}

fn milli(map: &ResourceMap) -> i64 {
    let q = &map.resources["cpu"].0;
    q.strip_suffix('m').unwrap_or(q).parse().unwrap()
}

fn bytes(map: &ResourceMap) -> i64 {
    map.resources
        .get("memory")
        .and_then(|q| q.0.parse().ok())
        .unwrap_or(-1)
}

fn assert_near(what: &str, got: i64, want: i64) {
    let tolerance = want / 4;
    assert!(
        (want - tolerance..=want + tolerance).contains(&got),
        "{what}: {got}m, want {want}m ± 25 %"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_metric_carries_host_applications_numa_usages_and_a_system_usage_without_them() {
    let (cluster, client, _ns) = cluster_with_namespace("nodemetric").await;
    let host = fake_host();
    let stop = Arc::new(AtomicBool::new(false));
    let ticker = tick(&host, stop.clone());
    let name = unique("nm");

    let slos: Api<NodeSLO> = Api::all(client.clone());
    slos.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO",
            "metadata": {"name": name},
            "spec": {"hostApplications": [{"name": "nginx", "priority": "koord-prod", "qos": "LS",
                "cgroupPath": {"base": "CgroupRoot", "parentDir": "host-latency-sensitive", "relativePath": "nginx"}}]}}))
        .unwrap(),
    )
    .await
    .unwrap();
    let metrics: Api<koord_api::NodeMetric> = Api::all(client.clone());
    metrics
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric",
                "metadata": {"name": name},
                "spec": {"metricCollectPolicy": {"aggregateDurationSeconds": 60, "reportIntervalSeconds": 30}}}))
            .unwrap(),
        )
        .await
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    cluster.write_kubeconfig(&kubeconfig).unwrap();
    let base = host.dir.path();
    let args = koordlet::cli::Args::try_parse_from([
        "koordlet".to_string(),
        format!("--node-name={name}"),
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--cgroup-root={}", host.roots.cgroup.display()),
        format!("--proc-root={}", host.roots.proc.display()),
        format!("--sys-root={}", host.roots.sys.display()),
        format!("--resctrl-root={}", host.roots.resctrl.display()),
        format!("--proc-sys-root={}", base.join("proc/sys").display()),
        format!("--state-dir={}", base.join("state").display()),
        format!("--cpuset-state-file={}", base.join("state/cpuset.json").display()),
        format!("--kubelet-root-dir={}", base.join("kubelet").display()),
        format!(
            "--prediction-checkpoint-filepath={}",
            base.join("checkpoints").display()
        ),
        "--cgroup-driver=cgroupfs".into(),
        "--pods-source=apiserver".into(),
        "--collect-interval=1s".into(),
        "--feature-gates=NodeTopologyReport=false".into(),
        "--metrics-addr=127.0.0.1:0".into(),
        "--health-addr=127.0.0.1:0".into(),
        "--enable-nri-runtime-hook=false".into(),
    ])
    .unwrap();
    let (stop_agent, stopped) = tokio::sync::oneshot::channel::<()>();
    let agent = tokio::spawn(async move {
        let shutdown = async move {
            let _ = stopped.await;
        };
        if let Err(e) = koordlet::agent::run_agent(args.agent, shutdown).await {
            panic!("koordlet failed: {e}");
        }
    });

    // Rounds collected before koordlet saw the NodeSLO count the application as system usage;
    // a report whose window starts after that one has the exact figures (the first one, unless
    // the NodeSLO came late: then the third, 60 s later).
    let node_memory = (8_000_000 - 6_000_000) * KIB;
    let app_memory = APP_MEMORY - 3;
    let status: NodeMetricStatus = wait_for(
        "a NodeMetric report with the host application for the whole window",
        Duration::from_secs(150),
        async || {
            let status = metrics.get(&name).await.ok()?.status?;
            let system = bytes(&status.node_metric.as_ref()?.system_usage);
            (!status.host_application_metric.as_deref()?.is_empty() && system == node_memory - app_memory)
                .then_some(status)
        },
    )
    .await;
    println!("{}", serde_json::to_string_pretty(&status).unwrap());

    let apps = status.host_application_metric.as_deref().unwrap();
    assert_eq!(apps.len(), 1);
    assert_eq!(apps[0].name, "nginx");
    assert_eq!(apps[0].priority.as_deref(), Some("koord-prod"));
    assert_eq!(apps[0].qos.as_deref(), Some("LS"));
    assert_eq!(bytes(&apps[0].usage), app_memory);
    assert_near("host application cpu", milli(&apps[0].usage), 500);

    let node = status.node_metric.as_ref().unwrap();
    assert_eq!(bytes(&node.node_usage), node_memory);
    assert_near("node cpu", milli(&node.node_usage), 2000);
    // System: node − host application (no pods on this node).
    assert_eq!(bytes(&node.system_usage), node_memory - app_memory);
    assert_near("system cpu", milli(&node.system_usage), 1500);
    assert!(milli(&node.system_usage) < milli(&node.node_usage));

    let numa = node.numa_usages.as_deref().unwrap();
    assert_eq!(
        numa.iter().map(|n| n.numa_node_id).collect::<Vec<_>>(),
        vec![0, 1]
    );
    assert_near("NUMA 0 cpu", milli(&numa[0].node_usage), 1500);
    assert_near("NUMA 1 cpu", milli(&numa[1].node_usage), 500);
    assert_eq!(bytes(&numa[0].node_usage), 3_000_000 * KIB);
    assert_eq!(bytes(&numa[1].node_usage), 1_000_000 * KIB);
    assert_eq!(bytes(&numa[0].system_usage), 3_000_000 * KIB - APP_NUMA0);
    assert_eq!(bytes(&numa[1].system_usage), 1_000_000 * KIB);

    // The NodeSLO stops declaring the application: the next report clears the field.
    slos.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"hostApplications": []}})),
    )
    .await
    .unwrap();
    wait_for(
        "the host application gone from the NodeMetric",
        Duration::from_secs(90),
        async || {
            let status = metrics.get(&name).await.ok()?.status?;
            status
                .host_application_metric
                .as_deref()
                .is_some_and(<[_]>::is_empty)
                .then_some(())
        },
    )
    .await;

    let _ = stop_agent.send(());
    agent.await.unwrap();
    stop.store(true, Ordering::Relaxed);
    ticker.join().unwrap();
}
