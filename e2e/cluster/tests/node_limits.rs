//! The simulated kubelet writes cgroup limits as a kubelet with the cgroupfs driver does, on
//! real cgroup v1 (tier 3): pod and container `cpu.shares`, CFS quota/period and memory limit
//! from requests and limits, the QoS levels' shares, `kubepods` from the node allocatable; batch
//! resources ignored (koordlet's job). `skipped: <reason>` where cgroups are not writable.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use koord_test_support::wait_for;
use koord_testcluster::node::{CgroupMode, FleetConfig, NodeSpec, SimulatedNodes};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};

fn read(dir: &Path, file: &str) -> String {
    fs::read_to_string(dir.join(file))
        .unwrap_or_else(|e| panic!("{}/{file}: {e}", dir.display()))
        .trim()
        .to_string()
}

fn pod(name: &str, containers: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": name, "annotations": { "sim.koordinator.sh/memory": "16Mi" } },
        "spec": { "containers": containers },
    }))
    .unwrap()
}

fn container(name: &str, requests: Value, limits: Value) -> Value {
    json!({ "name": name, "image": "busybox", "resources": { "requests": requests, "limits": limits } })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_cgroup_limits_on_real_cgroups() {
    let (_cluster, client, ns) = common::cluster_with_namespace().await;
    let node_name = common::unique("sim");
    let spec = NodeSpec::new(&node_name)
        .with_resource("kubernetes.io/batch-cpu", "4000")
        .with_resource("kubernetes.io/batch-memory", "4Gi");
    let nodes = SimulatedNodes::start(client.clone(), vec![spec], FleetConfig::default())
        .await
        .unwrap();
    if let CgroupMode::Fake { reason } = nodes.cgroup_tree().mode() {
        println!("skipped: real cgroups not usable ({reason})");
        return;
    }
    if matches!(nodes.cgroup_tree().mode(), CgroupMode::V2 { .. }) {
        println!("skipped: this test reads cgroup v1 files; the tree is cgroup v2");
        return;
    }
    let run_dirs = nodes.cgroup_tree().run_dirs().to_vec();
    let root = nodes.node(&node_name).unwrap().cgroup_root.clone();
    let (cpu, memory) = (root.join("cpu"), root.join("memory"));

    // kubepods from the node allocatable (4 CPUs, 8Gi), empty QoS levels at their minimum.
    assert_eq!(read(&cpu.join("kubepods"), "cpu.shares"), "4096");
    assert_eq!(
        read(&memory.join("kubepods"), "memory.limit_in_bytes"),
        (8u64 << 30).to_string()
    );
    assert_eq!(read(&cpu.join("kubepods/burstable"), "cpu.shares"), "2");
    assert_eq!(read(&cpu.join("kubepods/besteffort"), "cpu.shares"), "2");
    // The node and the run directory weigh what kubepods weighs at the root of a real node.
    assert_eq!(read(&cpu, "cpu.shares"), "4096");
    let run_cpu = run_dirs
        .iter()
        .find(|d| d.starts_with("/sys/fs/cgroup/cpu"))
        .unwrap();
    assert_eq!(read(run_cpu, "cpu.shares"), "4096");

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let guaranteed = pod(
        "guaranteed",
        json!([container(
            "main",
            json!({"cpu": "500m", "memory": "128Mi"}),
            json!({"cpu": "500m", "memory": "128Mi"})
        )]),
    );
    let burstable = pod(
        "burstable",
        json!([
            container(
                "capped",
                json!({"cpu": "250m"}),
                json!({"cpu": "1", "memory": "256Mi"})
            ),
            container("open", json!({"cpu": "250m"}), json!({})),
        ]),
    );
    let best_effort = pod(
        "batch",
        json!([container(
            "main",
            json!({"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "512Mi"}),
            json!({"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "512Mi"})
        )]),
    );
    let mut uids = Vec::new();
    for p in [&guaranteed, &burstable, &best_effort] {
        let created = pods.create(&PostParams::default(), p).await.unwrap();
        uids.push(created.metadata.uid.unwrap());
    }
    for name in ["guaranteed", "burstable", "batch"] {
        wait_for(&format!("{name} Running"), Duration::from_secs(30), async || {
            let pod = pods.get(name).await.ok()?;
            (pod.status?.phase.as_deref() == Some("Running")).then_some(())
        })
        .await;
    }

    // Guaranteed: directly under kubepods; pod and container limits equal.
    let pod_dir = format!("kubepods/pod{}", uids[0]);
    for dir in [
        cpu.join(&pod_dir),
        nodes.container_dirs(&uids[0], "cpu")[0].clone(),
    ] {
        assert_eq!(read(&dir, "cpu.shares"), "512", "{}", dir.display());
        assert_eq!(read(&dir, "cpu.cfs_period_us"), "100000");
        assert_eq!(read(&dir, "cpu.cfs_quota_us"), "50000");
    }
    for dir in [
        memory.join(&pod_dir),
        nodes.container_dirs(&uids[0], "memory")[0].clone(),
    ] {
        assert_eq!(read(&dir, "memory.limit_in_bytes"), (128u64 << 20).to_string());
    }

    // Burstable: pod shares from both requests; no pod quota or memory limit because one
    // container declares none; per container what it declares.
    let pod_dir = format!("kubepods/burstable/pod{}", uids[1]);
    assert_eq!(read(&cpu.join(&pod_dir), "cpu.shares"), "512");
    assert_eq!(read(&cpu.join(&pod_dir), "cpu.cfs_quota_us"), "-1");
    let unlimited: u64 = read(&memory.join(&pod_dir), "memory.limit_in_bytes")
        .parse()
        .unwrap();
    assert!(unlimited > 1 << 60, "pod memory limit {unlimited}");
    let mut containers: Vec<(String, String, String)> = nodes
        .container_dirs(&uids[1], "cpu")
        .into_iter()
        .zip(nodes.container_dirs(&uids[1], "memory"))
        .map(|(c, m)| {
            (
                read(&c, "cpu.shares"),
                read(&c, "cpu.cfs_quota_us"),
                read(&m, "memory.limit_in_bytes"),
            )
        })
        .collect();
    containers.sort();
    assert_eq!(containers[0].0, "256");
    assert_eq!(containers[0].1, "-1", "{containers:?}");
    assert!(containers[0].2.parse::<u64>().unwrap() > 1 << 60);
    assert_eq!(
        containers[1],
        (
            "256".to_string(),
            "100000".to_string(),
            (256u64 << 20).to_string()
        )
    );
    assert_eq!(read(&cpu.join("kubepods/burstable"), "cpu.shares"), "512");

    // BestEffort with batch resources: the kubelet ignores them.
    let pod_dir = format!("kubepods/besteffort/pod{}", uids[2]);
    assert_eq!(read(&cpu.join(&pod_dir), "cpu.shares"), "2");
    assert_eq!(read(&cpu.join(&pod_dir), "cpu.cfs_quota_us"), "-1");
    let container = nodes.container_dirs(&uids[2], "cpu")[0].clone();
    assert_eq!(read(&container, "cpu.shares"), "2");
    assert_eq!(read(&container, "cpu.cfs_quota_us"), "-1");
    assert_eq!(read(&cpu.join("kubepods/besteffort"), "cpu.shares"), "2");

    // The memory holders fit under their limits: nothing was OOM-killed.
    for uid in &uids {
        for pid in nodes.pod_pids(uid) {
            assert!(Path::new(&format!("/proc/{pid}")).exists(), "worker {pid} died");
        }
    }

    // The burstable level follows its pods.
    pods.delete("burstable", &DeleteParams::default()).await.unwrap();
    wait_for(
        "burstable shares back to 2",
        Duration::from_secs(30),
        async || (read(&cpu.join("kubepods/burstable"), "cpu.shares") == "2").then_some(()),
    )
    .await;

    nodes.shutdown().await;
    for dir in run_dirs {
        assert!(!dir.exists(), "{} left behind", dir.display());
    }
}
