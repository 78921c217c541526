//! koord-manager against the embedded API server at scale (default 1,000 nodes / 30,000 pods);
//! prints figures, asserts nothing about time:
//! - time from a ConfigMap change to every NodeSLO updated;
//! - the manager's RSS per pod (target ≤ 2 KiB): the manager runs as its own process (the
//!   `koord-manager` binary), so its RSS holds nothing of the API server. RSS is read once all
//!   NodeSLOs exist but no pod does, then after 30,000 pods arrived by watch, then in a fresh
//!   process that lists them at start; per pod = (RSS − RSS without pods) / pods;
//! - the manager's CPU time while the 30,000 pods arrive (each bound pod reconciles its node);
//! - time from an LS pod bound to a node (and deleted again) to its batch-cpu updated, with
//!   every other pod in place.
//!
//! Run: `cargo bench -p koord-manager --bench embedded_cluster`
//! (`KOORD_BENCH_NODES`, `KOORD_BENCH_PODS_PER_NODE` change the scale).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::{
    collections::HashSet,
    net::SocketAddr,
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node};
use koord_api::{NodeMetric, NodeSLO};
use koord_testcluster::{ClusterOptions, TestCluster};
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams},
    runtime::watcher,
};
use serde_json::{Value, json};

const NS: &str = "koordinator-system";
const PARALLEL: usize = 32;
const NODERESOURCE_RECONCILES: &str = "koord_manager_reconciles_total{controller=\"noderesource\"}";

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn config_map(client: &Client, suppress: u32) {
    let threshold =
        format!(r#"{{"clusterStrategy": {{"enable": true, "cpuSuppressThresholdPercent": {suppress}}}}}"#);
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "slo-controller-config", "namespace": NS},
        "data": {"colocation-config": r#"{"enable": true}"#, "resource-threshold-config": threshold}});
    Api::<ConfigMap>::namespaced(client.clone(), NS)
        .patch(
            "slo-controller-config",
            &PatchParams::apply("bench").force(),
            &Patch::Apply(cm),
        )
        .await
        .unwrap();
}

fn pod_name(node: usize, i: usize) -> String {
    format!("pod-{node}-{i}")
}

/// A pod as a real cluster would hold it: labels, annotations, two containers, status.
fn pod(node: usize, i: usize) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod_name(node, i), "namespace": "default",
            "labels": {"app": format!("app-{}", i % 7), "pod-template-hash": "5d8f7c9b6", "tier": "web"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "x".repeat(600),
                "prometheus.io/scrape": "true"}},
        "spec": {"nodeName": format!("node-{node}"),
            "priorityClassName": if i.is_multiple_of(3) { "koord-batch" } else { "koord-prod" },
            "priority": if i.is_multiple_of(3) { 5000 } else { 9000 },
            "containers": [
                {"name": "main", "image": "registry.example.com/team/app:1.2.3",
                 "args": ["--port=8080", "--log-level=info"],
                 "env": [{"name": "MODE", "value": "production"}, {"name": "REGION", "value": "eu"}],
                 "resources": {"requests": {"cpu": "500m", "memory": "1Gi"},
                               "limits": {"cpu": "1", "memory": "2Gi"}}},
                {"name": "sidecar", "image": "registry.example.com/mesh/proxy:1.20",
                 "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]},
        "status": {"phase": "Running", "qosClass": "Burstable", "podIP": "10.0.0.1"}})
}

/// Runs `requests`, `PARALLEL` at a time; panics on the first that fails.
async fn run_parallel(requests: impl Iterator<Item = impl Future<Output = Result<(), kube::Error>>>) {
    stream::iter(requests)
        .buffer_unordered(PARALLEL)
        .try_collect::<Vec<()>>()
        .await
        .unwrap();
}

async fn create_all(api: &Api<DynamicObject>, objects: impl Iterator<Item = Value>) {
    run_parallel(objects.map(|object| async move {
        let object: DynamicObject = serde_json::from_value(object).unwrap();
        api.create(&PostParams::default(), &object).await.map(|_| ())
    }))
    .await;
}

fn dynamic(
    client: &Client,
    api_version: &str,
    kind: &str,
    plural: &str,
    ns: Option<&str>,
) -> Api<DynamicObject> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let resource = ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: api_version.into(),
        kind: kind.into(),
        plural: plural.into(),
    };
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

async fn load_nodes(client: &Client, nodes: usize, pods_per_node: usize) {
    let node_api = dynamic(client, "v1", "Node", "nodes", None);
    create_all(
        &node_api,
        (0..nodes).map(|n| {
            json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": format!("node-{n}"),
                "labels": {"kubernetes.io/hostname": format!("node-{n}"), "pool": if n.is_multiple_of(2) { "a" } else { "b" }}}})
        }),
    )
    .await;
    let nodes_api: Api<Node> = Api::all(client.clone());
    let metrics_api: Api<NodeMetric> = Api::all(client.clone());
    let metric_api = dynamic(
        client,
        "slo.koordinator.sh/v1alpha1",
        "NodeMetric",
        "nodemetrics",
        None,
    );
    create_all(
        &metric_api,
        (0..nodes).map(|n| {
            json!({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric",
                "metadata": {"name": format!("node-{n}")}, "spec": {}})
        }),
    )
    .await;
    let now = jiff::Timestamp::now().to_string();
    run_parallel((0..nodes).map(|n| {
        let (nodes_api, metrics_api, now) = (&nodes_api, &metrics_api, &now);
        async move {
            let name = format!("node-{n}");
            let capacity = json!({"cpu": "96", "memory": "384Gi", "pods": "110"});
            let status = json!({"status": {"capacity": capacity, "allocatable": capacity}});
            nodes_api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
                .await?;
            let pods: Vec<Value> = (0..pods_per_node)
                .map(|i| {
                    json!({"namespace": "default", "name": pod_name(n, i),
                        "podUsage": {"resources": {"cpu": "200m", "memory": "600Mi"}}})
                })
                .collect();
            let report = json!({"status": {"updateTime": now,
                    "nodeMetric": {"nodeUsage": {"resources": {"cpu": "30", "memory": "100Gi"}},
                                   "systemUsage": {"resources": {"cpu": "2", "memory": "4Gi"}}},
                    "podsMetric": pods}});
            metrics_api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(report))
                .await
                .map(|_| ())
        }
    }))
    .await;
}

fn free_port() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

struct Manager {
    child: Child,
    metrics: SocketAddr,
}

impl Manager {
    fn start(kubeconfig: &Path) -> Manager {
        let metrics = free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_koord-manager"))
            .args(["--kubeconfig", kubeconfig.to_str().unwrap()])
            .args(["--leader-elect", "false"])
            .args(["--metrics-addr", &metrics.to_string()])
            .args(["--health-addr", &metrics.to_string()])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        Manager { child, metrics }
    }

    /// User + system CPU time of the whole process (every thread), from `/proc/<pid>/stat`.
    fn cpu_time(&self) -> Duration {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap();
        // Fields after the command name (which may hold spaces): utime and stime are the 12th
        // and 13th of them, in clock ticks.
        let rest = stat.rsplit_once(')').unwrap().1;
        let fields: Vec<u64> = rest
            .split_whitespace()
            .skip(11)
            .take(2)
            .map(|f| f.parse().unwrap())
            .collect();
        let ticks = Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok()?.trim().parse::<u64>().ok())
            .unwrap_or(100);
        Duration::from_millis((fields[0] + fields[1]) * 1000 / ticks)
    }

    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }

    /// A counter or gauge without labels, from `/metrics`.
    async fn metric(&self, name: &str) -> Option<f64> {
        let body = koord_test_support::scrape(self.metrics).await?;
        koord_test_support::sample(&body, name)
    }

    async fn wait_pods_indexed(&self, pods: usize) {
        while self.metric("koord_manager_pods_indexed").await != Some(pods as f64) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Manager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn suppress_of(slo: &NodeSLO) -> Option<i64> {
    slo.spec
        .resource_used_threshold_with_be
        .as_ref()?
        .cpu_suppress_threshold_percent
}

/// Runs `change` once a NodeSLO watch is established, then waits until all `nodes` NodeSLOs
/// carry `suppress`; returns the time from the change to the last update.
async fn all_node_slos(
    client: &Client,
    nodes: usize,
    suppress: i64,
    change: impl Future<Output = ()>,
) -> Duration {
    let mut done = HashSet::new();
    let mut events = watcher(Api::<NodeSLO>::all(client.clone()), watcher::Config::default()).boxed();
    let note = |slo: NodeSLO, done: &mut HashSet<String>| {
        if suppress_of(&slo) == Some(suppress) {
            done.extend(slo.metadata.name);
        }
    };
    loop {
        match events.try_next().await.unwrap().unwrap() {
            watcher::Event::InitApply(slo) => note(slo, &mut done),
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    let start = Instant::now();
    change.await;
    while done.len() < nodes {
        if let watcher::Event::Apply(slo) = events.try_next().await.unwrap().unwrap() {
            note(slo, &mut done);
        }
    }
    start.elapsed()
}

async fn wait_node_slos(client: &Client, nodes: usize) {
    loop {
        let list = Api::<NodeSLO>::all(client.clone())
            .list_metadata(&ListParams::default())
            .await
            .unwrap();
        if list.items.len() >= nodes {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn batch_cpu(client: &Client, node: &str) -> Option<String> {
    let node = Api::<Node>::all(client.clone()).get(node).await.unwrap();
    node.status?
        .allocatable?
        .get("kubernetes.io/batch-cpu")
        .map(|q| koord_api::canonical_quantity(&q.0).unwrap())
}

/// Polls until `node`'s batch-cpu satisfies `done`; returns how long that took.
async fn until_batch_cpu(client: &Client, node: &str, done: impl Fn(Option<&str>) -> bool) -> Duration {
    let start = Instant::now();
    while !done(batch_cpu(client, node).await.as_deref()) {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "{node}: batch-cpu did not move from {:?}",
            batch_cpu(client, node).await
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    start.elapsed()
}

/// Binds an LS pod of 40 cores (unmeasured, so it counts by its request) to `node-0` and
/// deletes it again; prints how long batch-cpu took to follow each.
async fn follow_bound_pod(client: &Client) {
    let node = "node-0";
    until_batch_cpu(client, node, |v| v.is_some()).await;
    let before = batch_cpu(client, node).await;
    let pod_api = dynamic(client, "v1", "Pod", "pods", Some("default"));
    let probe = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "bound-probe", "namespace": "default"},
        "spec": {"nodeName": node, "priorityClassName": "koord-prod", "priority": 9000,
            "containers": [{"name": "main", "image": "app",
                "resources": {"requests": {"cpu": "40", "memory": "1Gi"}}}]}});
    let start = Instant::now();
    create_all(&pod_api, std::iter::once(probe)).await;
    let created = start.elapsed();
    let took = until_batch_cpu(client, node, |v| v.map(str::to_string) != before).await;
    let bound = batch_cpu(client, node).await;
    let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "none".into());
    println!(
        "  LS pod bound to {node} -> its batch-cpu updated: {:?} (from {} to {})",
        created + took,
        show(&before),
        show(&bound)
    );
    // Not necessarily back to `before`: that may have been a value the diff threshold held.
    let start = Instant::now();
    pod_api.delete("bound-probe", &Default::default()).await.unwrap();
    until_batch_cpu(client, node, |v| v.map(str::to_string) != bound).await;
    println!(
        "  LS pod deleted -> batch-cpu updated: {:?} (to {})",
        start.elapsed(),
        show(&batch_cpu(client, node).await)
    );
}

fn per_pod(rss: u64, baseline: u64, pods: usize) -> String {
    let bytes = (rss.saturating_sub(baseline) * 1024) as f64 / pods as f64;
    format!("{bytes:.0} B/pod")
}

#[tokio::main]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let nodes = env_usize("KOORD_BENCH_NODES", 1_000);
    let pods_per_node = env_usize("KOORD_BENCH_PODS_PER_NODE", 30);
    let pods = nodes * pods_per_node;
    println!("embedded cluster: {nodes} nodes, {pods} pods");

    let cluster = TestCluster::start(ClusterOptions::default()).await.unwrap();
    let crds = concat!(env!("CARGO_MANIFEST_DIR"), "/../charts/koordinator/crds");
    cluster.install_crds_from_dir(crds).await.unwrap();
    let client = cluster.client().unwrap();
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
    for (name, value) in [("koord-prod", 9000), ("koord-batch", 5000)] {
        cluster
            .apply_object(
                json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": name}, "value": value}),
            )
            .await
            .unwrap();
    }
    config_map(&client, 65).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    cluster.write_kubeconfig(&kubeconfig).unwrap();

    let start = Instant::now();
    load_nodes(&client, nodes, pods_per_node).await;
    println!("  loaded {nodes} Nodes and NodeMetrics in {:?}", start.elapsed());

    // 1. A manager with every node and no pod.
    let manager = Manager::start(&kubeconfig);
    let start = Instant::now();
    wait_node_slos(&client, nodes).await;
    manager.wait_pods_indexed(0).await;
    println!("  manager started: {nodes} NodeSLOs after {:?}", start.elapsed());
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rss_empty = manager.rss_kib();
    println!("  manager RSS without pods: {} MiB", rss_empty / 1024);

    // 2. Pods arrive by watch.
    let cpu_before = manager.cpu_time();
    let reconciles_before = manager.metric(NODERESOURCE_RECONCILES).await.unwrap_or(0.0);
    let start = Instant::now();
    let pod_api = dynamic(&client, "v1", "Pod", "pods", Some("default"));
    create_all(
        &pod_api,
        (0..nodes).flat_map(|n| (0..pods_per_node).map(move |i| pod(n, i))),
    )
    .await;
    println!("  created {pods} pods in {:?}", start.elapsed());
    manager.wait_pods_indexed(pods).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    println!(
        "  manager CPU time while {pods} pods arrived: {:?} ({} noderesource reconciles)",
        manager.cpu_time() - cpu_before,
        manager.metric(NODERESOURCE_RECONCILES).await.unwrap_or(0.0) - reconciles_before
    );
    let rss_watched = manager.rss_kib();
    println!(
        "  manager RSS with {pods} pods (arrived by watch): {} MiB = {} (target <= 2048 B/pod)",
        rss_watched / 1024,
        per_pod(rss_watched, rss_empty, pods)
    );

    // An LS pod bound to a node, then deleted: its batch-cpu follows at once.
    follow_bound_pod(&client).await;

    // 3. ConfigMap change → every NodeSLO updated.
    for suppress in [66, 67] {
        let took = all_node_slos(&client, nodes, i64::from(suppress), config_map(&client, suppress)).await;
        println!("  ConfigMap change -> all {nodes} NodeSLOs updated: {took:?}");
    }
    drop(manager);

    // 4. A fresh manager lists everything at start.
    let manager = Manager::start(&kubeconfig);
    let start = Instant::now();
    manager.wait_pods_indexed(pods).await;
    println!(
        "  restarted manager indexed {pods} pods after {:?}",
        start.elapsed()
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rss_listed = manager.rss_kib();
    println!(
        "  manager RSS with {pods} pods (listed at start): {} MiB = {} (target <= 2048 B/pod)",
        rss_listed / 1024,
        per_pod(rss_listed, rss_empty, pods)
    );
    let took = all_node_slos(&client, nodes, 68, config_map(&client, 68)).await;
    println!("  ConfigMap change -> all {nodes} NodeSLOs updated (restarted manager): {took:?}");

    // 5. Node churn: as many Nodes again, created and deleted twice. A second cycle that ends
    // where the first did means what the first left is reused memory, not per-node state kept.
    for cycle in 1..=2 {
        let took = churn_nodes(&client, nodes).await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        println!(
            "  {nodes} more Nodes created and deleted (cycle {cycle}, {took:?}): manager RSS {} MiB",
            manager.rss_kib() / 1024
        );
    }
    drop(manager);
}

/// NodeSLOs whose name starts with `prefix`.
async fn node_slos_named(client: &Client, prefix: &str) -> usize {
    Api::<NodeSLO>::all(client.clone())
        .list_metadata(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|slo| {
            slo.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with(prefix))
        })
        .count()
}

/// Creates `nodes` Nodes named `churn-<n>`, waits for their NodeSLOs, deletes them and waits
/// until their NodeSLOs are gone; returns how long the cycle took.
async fn churn_nodes(client: &Client, nodes: usize) -> Duration {
    let start = Instant::now();
    let node_api = dynamic(client, "v1", "Node", "nodes", None);
    create_all(
        &node_api,
        (0..nodes).map(|n| {
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": format!("churn-{n}")},
                "status": {"capacity": {"cpu": "96", "memory": "384Gi", "pods": "110"}}})
        }),
    )
    .await;
    while node_slos_named(client, "churn-").await < nodes {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    run_parallel((0..nodes).map(|n| {
        let node_api = &node_api;
        async move {
            node_api
                .delete(&format!("churn-{n}"), &Default::default())
                .await
                .map(|_| ())
        }
    }))
    .await;
    while node_slos_named(client, "churn-").await > 0 {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    start.elapsed()
}
