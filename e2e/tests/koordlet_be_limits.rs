//! koordlet on a simulated node (embedded cluster, real cgroup v1) turns a BE pod's batch
//! resources into its cgroup limits, at pod and container level, over what the simulated kubelet
//! wrote (which ignores batch resources). `skipped: <reason>` where cgroups are not writable.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use koord_e2e::components::{Components, Selection};
use koord_testcluster::node::CgroupMode;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn koordlet_sets_be_pod_cgroups_from_batch_resources_on_real_cgroups() {
    let cluster = common::cluster().await;
    let client = cluster.client().unwrap();
    let nodes = common::nodes(&cluster, 1).await;
    if let CgroupMode::Fake { reason } = nodes.cgroup_tree().mode() {
        // The fake cgroupfs would accept any write: nothing real to check.
        println!("skipped: real cgroups not usable ({reason})");
        return;
    }
    let node = nodes.nodes()[0].clone();
    let ns = common::unique("batch");
    cluster
        .apply_object(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let batch = json!({"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "256Mi"});
    let limits = json!({"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "256Mi"});
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "be", "labels": {"koordinator.sh/qosClass": "BE"},
                     "annotations": {"sim.koordinator.sh/cpu-load": "0.2", "sim.koordinator.sh/memory": "32Mi"}},
        "spec": {"priorityClassName": "koord-batch", "containers": [{"name": "main", "image": "busybox",
            "resources": {"requests": batch, "limits": limits}}]}
    }))
    .unwrap();
    let uid = pods
        .create(&PostParams::default(), &pod)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    common::wait_for("BE pod Running", Duration::from_secs(30), async || {
        let pod = pods.get("be").await.ok()?;
        (pod.status?.phase.as_deref() == Some("Running")).then_some(())
    })
    .await;

    let pod_cpu = node.cgroup_root.join(format!("cpu/kubepods/besteffort/pod{uid}"));
    let pod_memory = node
        .cgroup_root
        .join(format!("memory/kubepods/besteffort/pod{uid}"));
    let container_cpu = nodes.container_dirs(&uid, "cpu")[0].clone();
    let container_memory = nodes.container_dirs(&uid, "memory")[0].clone();
    // The kubelet's view of a BestEffort pod: 2 shares, no quota.
    assert_eq!(read(&pod_cpu.join("cpu.shares")).as_deref(), Some("2"));
    assert_eq!(read(&pod_cpu.join("cpu.cfs_quota_us")).as_deref(), Some("-1"));

    // Started after the pod runs, koordlet sees it in its first kubelet /pods answer.
    let components = Components::start(
        &cluster,
        nodes.nodes(),
        Selection {
            koordlet: true,
            ..Selection::none()
        },
    )
    .await
    .unwrap();
    let expected = [
        (pod_cpu.join("cpu.shares"), "512".to_string()),
        (pod_cpu.join("cpu.cfs_quota_us"), "100000".to_string()),
        (
            pod_memory.join("memory.limit_in_bytes"),
            (256u64 << 20).to_string(),
        ),
        (container_cpu.join("cpu.shares"), "512".to_string()),
        (container_cpu.join("cpu.cfs_quota_us"), "100000".to_string()),
        (
            container_memory.join("memory.limit_in_bytes"),
            (256u64 << 20).to_string(),
        ),
    ];
    common::wait_for(
        "koordlet's BE limits in the pod's cgroups",
        Duration::from_secs(30),
        async || {
            expected
                .iter()
                .all(|(path, value)| read(path).as_deref() == Some(value.as_str()))
                .then_some(())
        },
    )
    .await;
    // The worker holds 32 MiB under the 256 MiB limit: still alive.
    for pid in nodes.pod_pids(&uid) {
        assert!(Path::new(&format!("/proc/{pid}")).exists(), "worker {pid} died");
    }

    components.shutdown(&cluster).await;
    let run_dirs = nodes.cgroup_tree().run_dirs().to_vec();
    nodes.shutdown().await;
    for dir in run_dirs {
        assert!(!dir.exists(), "{} left behind", dir.display());
    }
}
