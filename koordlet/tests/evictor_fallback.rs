//! The evictor's `--eviction-fallback` when the Eviction API does not evict: a
//! PodDisruptionBudget's 429 on the embedded API server (tier 4), an API server that cannot be
//! reached, and container processes killed through a real cgroup v1 tree (tier 3).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use koord_test_support::CgroupV1Tree;
use koord_testcluster::{ClusterOptions, TestCluster};
use koordlet::evict_fallback::{ContainerKiller, EvictionFallback};
use koordlet::evictor::{EvictOutcome, Evictor};
use koordlet::states::PodMeta;
use koordlet::system::Cgroups;
use koordlet::system::layout::CgroupLayout;
use koordlet::telemetry::Telemetry;
use koordlet_core::strategies::eviction::EvictionPick;
use koordlet_core::{CgroupDriver, KubeCgroupPaths};
use kube::api::{Api, PostParams};
use serde_json::json;

const UID: &str = "0a1b2c3d-0000-1111-2222-333344445555";
const CID: &str = "feedface0123";

fn pick(pod: &PodMeta) -> EvictionPick {
    EvictionPick {
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        uid: pod.uid.as_str().to_owned(),
        strategy: "memory_evict",
        reason: "EvictPodByNodeMemoryUsage",
        message: "test".into(),
    }
}

/// A killer on a fake tree: for the branches that never reach it.
fn idle_killer() -> ContainerKiller {
    ContainerKiller::new(
        Arc::new(Cgroups::new("/nonexistent", CgroupLayout::v2())),
        KubeCgroupPaths::new(CgroupDriver::Cgroupfs),
    )
}

fn evictor(client: &kube::Client, fallback: EvictionFallback, killer: ContainerKiller) -> Evictor {
    let mut registry = prometheus_client::registry::Registry::default();
    let telemetry = Telemetry::register(&mut registry, "node-1");
    Evictor::new(client.clone(), "node-a", false, telemetry).with_fallback(fallback, killer)
}

/// A cluster with BE pod `name` guarded by a PDB that forbids any eviction.
async fn guarded_pod(name: &str) -> (TestCluster, kube::Client, PodMeta) {
    let cluster = TestCluster::start(ClusterOptions::default()).await.unwrap();
    let client = koordlet::evictor::no_retry_client(cluster.kube_config()).unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"koordinator.sh/qosClass": "BE", "app": name}},
        "spec": {"containers": [{"name": "c", "image": "busy"}]}
    }))
    .unwrap();
    let created = pods.create(&PostParams::default(), &pod).await.unwrap();
    let pdbs: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
        Api::namespaced(client.clone(), "default");
    let pdb = serde_json::from_value(json!({
        "metadata": {"name": "guard"},
        "spec": {"selector": {"matchLabels": {"app": name}}, "minAvailable": 1}
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    (cluster, client, PodMeta::new(Arc::new(created)).unwrap())
}

async fn gone_or_deleting(client: &kube::Client, name: &str) -> bool {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    match pods.get_opt(name).await.unwrap() {
        None => true,
        Some(p) => p.metadata.deletion_timestamp.is_some(),
    }
}

/// A client for an API server that is down (nothing listens on port 1).
fn unreachable_client() -> kube::Client {
    let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
    koordlet::evictor::no_retry_client(config).unwrap()
}

/// A BE pod with one running container, as the kubelet reports it.
fn node_pod() -> PodMeta {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "be-local", "namespace": "default", "uid": UID,
                     "labels": {"koordinator.sh/qosClass": "BE"}},
        "spec": {"containers": [{"name": "c"}]},
        "status": {"phase": "Running", "containerStatuses": [{"name": "c",
            "containerID": format!("containerd://{CID}"), "image": "", "imageID": "",
            "ready": true, "restartCount": 0}]}
    }))
    .unwrap();
    PodMeta::new(Arc::new(pod)).unwrap()
}

#[tokio::test]
async fn fallback_none_keeps_the_pdb_refusal() {
    let (_c, client, pod) = guarded_pod("be-none").await;
    let mut ev = evictor(&client, EvictionFallback::None, idle_killer());
    let out = ev
        .evict(&[pick(&pod)], std::slice::from_ref(&pod), Instant::now())
        .await;
    assert_eq!(out, [EvictOutcome::Failed]);
    assert!(!gone_or_deleting(&client, "be-none").await);
    // Not in flight: the next round may pick it again.
    assert!(
        ev.in_flight(std::slice::from_ref(&pod), Instant::now())
            .is_empty()
    );
}

#[tokio::test]
async fn fallback_delete_deletes_a_pdb_guarded_pod() {
    let (_c, client, pod) = guarded_pod("be-delete").await;
    let mut ev = evictor(&client, EvictionFallback::Delete, idle_killer());
    let out = ev
        .evict(&[pick(&pod)], std::slice::from_ref(&pod), Instant::now())
        .await;
    assert_eq!(out, [EvictOutcome::Deleted]);
    assert!(gone_or_deleting(&client, "be-delete").await);
    assert!(
        ev.in_flight(std::slice::from_ref(&pod), Instant::now())
            .contains(pod.uid.as_str())
    );
}

#[tokio::test]
async fn fallback_delete_fails_when_the_api_server_is_down() {
    let pod = node_pod();
    let mut ev = evictor(&unreachable_client(), EvictionFallback::Delete, idle_killer());
    let out = ev
        .evict(&[pick(&pod)], std::slice::from_ref(&pod), Instant::now())
        .await;
    assert_eq!(out, [EvictOutcome::Failed]);
}

#[tokio::test]
async fn fallback_kill_containers_without_a_tree_fails() {
    let pod = node_pod();
    let mut ev = evictor(
        &unreachable_client(),
        EvictionFallback::KillContainers,
        idle_killer(),
    );
    let out = ev
        .evict(&[pick(&pod)], std::slice::from_ref(&pod), Instant::now())
        .await;
    assert_eq!(out, [EvictOutcome::Failed]);
}

#[tokio::test]
async fn fallback_kill_containers_kills_the_container_processes_when_the_api_server_is_down() {
    let Some(mut tree) = CgroupV1Tree::or_skip(&["memory"]) else {
        return;
    };
    let memory_mount = tree.mount("memory").unwrap().to_path_buf();
    let (Some(root), Some(dir_name)) = (memory_mount.parent(), memory_mount.file_name()) else {
        println!("skipped: memory controller mounted at {}", memory_mount.display());
        return;
    };
    if dir_name != "memory" {
        println!("skipped: memory controller mounted as {}", memory_mount.display());
        return;
    }
    let pod = node_pod();
    let container = KubeCgroupPaths::new(CgroupDriver::Cgroupfs).container_dir(
        pod.kube_qos,
        &pod.uid,
        pod.containers[0].id.as_ref().unwrap(),
    );
    let rel = container.as_path().to_str().unwrap().to_owned();
    tree.mkdir(&rel).unwrap();
    // The pod sandbox's process lives in the pod directory: it must survive.
    let pod_rel = std::path::Path::new(&rel)
        .parent()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let mut pids = Vec::new();
    for target in [&rel, &rel, &pod_rel] {
        let child = Command::new("sleep")
            .arg("600")
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        pids.push(child.id());
        tree.add_process(target, child.id()).unwrap();
        tree.adopt(child);
    }
    let paths =
        KubeCgroupPaths::with_parent(CgroupDriver::Cgroupfs, std::path::Path::new(tree.name())).unwrap();
    let killer = ContainerKiller::new(Arc::new(Cgroups::new(root, CgroupLayout::v1())), paths);
    let mut ev = evictor(&unreachable_client(), EvictionFallback::KillContainers, killer);
    let out = ev
        .evict(&[pick(&pod)], std::slice::from_ref(&pod), Instant::now())
        .await;
    assert_eq!(out, [EvictOutcome::ContainersKilled]);
    assert!(
        ev.in_flight(std::slice::from_ref(&pod), Instant::now())
            .contains(UID)
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !tree.read("memory", &rel, "cgroup.procs").unwrap().is_empty() {
        assert!(Instant::now() < deadline, "container processes still alive");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        tree.read("memory", &pod_rel, "cgroup.procs").unwrap(),
        pids[2].to_string(),
        "the sandbox process is left alone"
    );
}
