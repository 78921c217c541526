//! Colocation end to end: a pod in a colocation namespace is mutated to BE with batch resources
//! by the webhook, scheduled on batch resources, started, and given its BE cgroup limits by
//! koordlet; CPU suppress squeezes the BE tier when an LS pod burns CPU.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use koord_api::ClusterColocationProfile;
use koord_api::names::KEY_RESOURCE_THRESHOLD_CONFIG;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use crate::common::{self, wait_for};
use crate::env::{Cleanup, Env, Load, POD_START, Wanted, find_dir};

const MI: u64 = 1 << 20;

/// A cgroup or proc file, trimmed; None when unreadable.
pub(crate) fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

/// A colocation namespace and a profile (no `schedulerName`: no koord-scheduler runs) that
/// makes every pod in it BE with batch priority.
pub(crate) async fn colocation(env: &Env) -> Cleanup {
    profiled_namespace(env, "coloc", "BE", "koord-batch").await
}

/// A namespace (name prefix `prefix`) and a profile that gives every pod in it QoS class `qos`
/// and priority class `priority_class`.
pub(crate) async fn profiled_namespace(env: &Env, prefix: &str, qos: &str, priority_class: &str) -> Cleanup {
    let key = common::unique("e2e");
    let mut cleanup = env
        .namespace(prefix, json!({"koord-e2e.koordinator.sh/colocation": key}))
        .await;
    let profile = common::unique("e2e-profile");
    let p: ClusterColocationProfile = serde_json::from_value(json!({
        "metadata": {"name": profile},
        "spec": {
            "namespaceSelector": {"matchLabels": {"koord-e2e.koordinator.sh/colocation": key}},
            "qosClass": qos, "priorityClassName": priority_class, "koordinatorPriority": 1000,
            "labels": {"koord-e2e.koordinator.sh/mutated": "true"},
        }
    }))
    .unwrap();
    Api::<ClusterColocationProfile>::all(env.client.clone())
        .create(&PostParams::default(), &p)
        .await
        .unwrap();
    cleanup.profiles.push(profile);
    cleanup
}

/// The pod's cgroup directory below `<root>/<controller>` (found by UID, wherever the kubelet's
/// cgroup root puts `kubepods`).
pub(crate) fn pod_cgroup(root: &Path, controller: &str, uid: &str) -> Option<PathBuf> {
    let besteffort = find_dir(&root.join(controller), "besteffort", 3)?;
    let dir = besteffort.join(format!("pod{uid}"));
    dir.is_dir().then_some(dir)
}

pub(crate) fn container_hash(pod: &Pod) -> String {
    let id = pod.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0]
        .container_id
        .clone()
        .unwrap();
    id.split_once("://").map_or(id.clone(), |(_, h)| h.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn colocated_pod_becomes_be_runs_on_batch_resources_with_be_cgroup_limits() {
    let env = Env::start(Wanted::default()).await;
    let cleanup = colocation(&env).await;
    let ns = cleanup.ns().to_string();
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), &ns);
    // A small request: on a real node the batch offer is what the node's own processes leave.
    let resources =
        json!({"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "128Mi"}});
    let pod = env.pod(
        "batch",
        json!({"app": "batch"}),
        vec![env.container("main", Load::Idle, resources)],
    );
    // The pod asks for 100 batch-cpu: wait until a node offers that much.
    common::wait_for_batch_cpu(&env.client, 100).await;
    let created = common::create_until_mutated_to_be(&pods, &pod).await;
    let spec = created.spec.clone().unwrap();
    assert_eq!(spec.priority, Some(5000), "koord-batch priority");
    assert_eq!(spec.scheduler_name.as_deref(), Some("default-scheduler"));
    let res = spec.containers[0].resources.clone().unwrap();
    let (requests, limits) = (res.requests.unwrap(), res.limits.unwrap());
    let value = |q| koord_api::ExactQuantity::from_k8s(q).map(koord_api::ExactQuantity::value);
    assert_eq!(value(&requests["kubernetes.io/batch-cpu"]), Ok(100));
    // 1000 comes back as `1k` from a real API server (canonical form), as `1000` from ours.
    assert_eq!(value(&limits["kubernetes.io/batch-cpu"]), Ok(1000));
    assert!(
        !requests.contains_key("cpu") && !limits.contains_key("memory"),
        "{requests:?} {limits:?}"
    );
    let memory_limit = koord_api::ExactQuantity::from_k8s(&limits["kubernetes.io/batch-memory"]).unwrap();
    assert_eq!(
        memory_limit,
        koord_api::ExactQuantity::from_k8s(&k8s_openapi::apimachinery::pkg::api::resource::Quantity(
            "128Mi".into()
        ))
        .unwrap()
    );
    // Only cpu and memory decide the Kubernetes QoS class: batch resources only is BestEffort.
    assert_eq!(
        created.status.as_ref().and_then(|s| s.qos_class.as_deref()),
        Some("BestEffort")
    );

    let running = env.wait_running(&ns, "batch").await;
    let node = running.spec.as_ref().unwrap().node_name.clone().unwrap();
    let uid = running.metadata.uid.clone().unwrap();
    let root = match env.cgroup_root(&node) {
        Ok(root) => root,
        Err(reason) => {
            println!("skipped: {reason} (the pod was mutated, scheduled and started)");
            return;
        }
    };
    let hash = container_hash(&running);
    let expected = [
        ("cpu", "cpu.cfs_quota_us", "100000".to_string()),
        // 100 milli-cores x 1024 / 1000, as the kubelet computes shares.
        ("cpu", "cpu.shares", "102".to_string()),
        ("memory", "memory.limit_in_bytes", (128 * MI).to_string()),
    ];
    let found = wait_for(
        "koordlet's BE limits in the pod and container cgroups",
        Duration::from_secs(60),
        async || {
            let mut values = Vec::new();
            for (controller, file, want) in &expected {
                let pod_dir = pod_cgroup(&root, controller, &uid)?;
                for dir in [pod_dir.clone(), pod_dir.join(&hash)] {
                    let got = read(&dir.join(file))?;
                    if &got != want {
                        return None;
                    }
                    values.push(format!("{}={got}", dir.join(file).display()));
                }
            }
            Some(values)
        },
    )
    .await;
    println!("{}", found.join("\n"));
}

/// A profile matching every namespace (no `namespaceSelector`) and pods with a unique label: a
/// pod so labelled in a colocation namespace is mutated, the same pod in `kube-system` or the
/// release namespace is not. On Kubernetes before 1.21 the webhook configurations' namespace-name
/// selector matches every namespace, so there the webhook's own check is what holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_of_kube_system_and_the_release_namespace_are_never_mutated() {
    let env = Env::start(Wanted::default()).await;
    let key = common::unique("e2e");
    let mut cleanup = env.namespace("excluded", json!({})).await;
    let profile = common::unique("e2e-everywhere");
    let p: ClusterColocationProfile = serde_json::from_value(json!({
        "metadata": {"name": profile},
        "spec": {
            "selector": {"matchLabels": {"koord-e2e.koordinator.sh/everywhere": key}},
            "qosClass": "BE", "priorityClassName": "koord-batch", "koordinatorPriority": 1000,
        }
    }))
    .unwrap();
    Api::<ClusterColocationProfile>::all(env.client.clone())
        .create(&PostParams::default(), &p)
        .await
        .unwrap();
    cleanup.profiles.push(profile);
    let pod = env.pod(
        &common::unique("probe"),
        json!({"koord-e2e.koordinator.sh/everywhere": key}),
        vec![env.container("main", Load::Idle, json!({}))],
    );
    // Dry-run creates pass admission (the webhooks declare no side effects) and store nothing.
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let qos = |pod: &Pod| {
        pod.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("koordinator.sh/qosClass").cloned())
    };
    // The webhook's profile cache follows the API server: wait until the profile applies.
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), cleanup.ns());
    wait_for(
        "the profile mutating a pod",
        Duration::from_secs(30),
        async || {
            let created = pods.create(&dry_run, &pod).await.ok()?;
            (qos(&created).as_deref() == Some("BE")).then_some(())
        },
    )
    .await;
    for namespace in ["kube-system", koord_api::names::DEFAULT_CONFIG_NAMESPACE] {
        let pods: Api<Pod> = Api::namespaced(env.client.clone(), namespace);
        let created = pods.create(&dry_run, &pod).await.unwrap();
        assert_eq!(
            qos(&created),
            None,
            "a pod in {namespace} was mutated: {:?}",
            created.metadata.labels
        );
        assert_ne!(
            created.spec.as_ref().and_then(|s| s.priority),
            Some(5000),
            "{namespace}"
        );
    }
}

/// The BE tier's CFS quota (`kubepods/besteffort/cpu.cfs_quota_us`) on `root`.
fn be_quota(root: &Path) -> Option<i64> {
    let dir = find_dir(&root.join("cpu"), "besteffort", 3)?;
    read(&dir.join("cpu.cfs_quota_us"))?.parse().ok()
}

/// Median of a few reads a second apart (suppress follows a noisy node usage).
async fn settled_quota(root: &Path) -> i64 {
    let mut values = Vec::new();
    for _ in 0..5 {
        if let Some(q) = be_quota(root) {
            values.push(q);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    values.sort_unstable();
    values.get(values.len() / 2).copied().unwrap_or(-1)
}

/// Busy and total jiffies of the whole host, from the first line of `/proc/stat`.
fn host_jiffies() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let fields: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    let total: u64 = fields.iter().take(8).sum();
    // idle and iowait are not busy.
    let idle = fields.get(3)? + fields.get(4).unwrap_or(&0);
    Some((total - idle, total))
}

/// Cores the host keeps busy right now: measured over 2 s (the load average would still count
/// the previous scenario's pods for minutes after they stopped).
async fn busy_cores(cpus: f64) -> Option<f64> {
    let (busy0, total0) = host_jiffies()?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (busy1, total1) = host_jiffies()?;
    let total = total1.checked_sub(total0).filter(|t| *t > 0)?;
    Some(busy1.saturating_sub(busy0) as f64 / total as f64 * cpus)
}

/// Waits up to a minute for the host to have a core to spare; the busy cores when it never did.
async fn host_saturated(cpus: f64) -> Option<f64> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let busy = busy_cores(cpus).await?;
        if busy <= cpus - 0.5 {
            return None;
        }
        if std::time::Instant::now() > deadline {
            return Some(busy);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpu_suppress_lowers_the_be_quota_when_an_ls_pod_burns_cpu() {
    let _cpu = common::cpu_lock().await;
    let cpus = std::thread::available_parallelism().map_or(2, std::num::NonZero::get) as f64;
    if let Some(busy) = host_saturated(cpus).await {
        // Suppress subtracts LS and system usage from the node's share; when other processes
        // already use every core, one more busy LS pod does not change that sum.
        println!(
            "skipped: host CPU saturated by other processes ({busy:.1} of {cpus} cores busy for a minute)"
        );
        return;
    }
    let env = Env::start(Wanted::default()).await;
    let (node, root) = match env.first_node_cgroups().await {
        Ok(found) => found,
        Err(reason) => {
            println!("skipped: {reason}");
            return;
        }
    };
    let mut cleanup = env.namespace("suppress", json!({})).await;
    let ns = cleanup.ns().to_string();
    cleanup
        .set_config(
            KEY_RESOURCE_THRESHOLD_CONFIG,
            "{\"clusterStrategy\": {\"enable\": true, \"cpuSuppressThresholdPercent\": 65, \"cpuSuppressPolicy\": \"cfsQuota\"}}",
        )
        .await
        .unwrap();
    wait_for(
        "koordlet to set a BE quota",
        Duration::from_secs(60),
        async || be_quota(&root).filter(|q| *q > 0),
    )
    .await;
    let idle = settled_quota(&root).await;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), &ns);
    let mut burner = env.pod(
        "ls-burner",
        json!({"koordinator.sh/qosClass": "LS"}),
        vec![env.container(
            "burn",
            Load::BurnOneCore,
            json!({"requests": {"cpu": "1", "memory": "32Mi"}}),
        )],
    );
    burner.spec.as_mut().unwrap().node_name = Some(node.clone());
    pods.create(&PostParams::default(), &burner).await.unwrap();
    env.wait_running(&ns, "ls-burner").await;
    let squeezed = wait_for("BE quota below its idle value", POD_START, async || {
        let q = settled_quota(&root).await;
        (q > 0 && q <= idle - 30_000).then_some(q)
    })
    .await;
    println!("BE cfs_quota_us: idle {idle}, with one busy LS core {squeezed}");
}
