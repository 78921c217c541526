//! The memory footprint of each installed component as the node's kernel charges it: every
//! koord-manager, koord-webhook, koordlet and koord-scheduler-extender pod's resident set (its
//! own `process_resident_memory_bytes`) and its pod memory cgroup (`memory.usage_in_bytes`,
//! page cache included, and the kernel memory within it, `memory.kmem.usage_in_bytes`) against
//! the chart's limit. A measurement: it prints the figures (docs/benchmarks.md, real cluster)
//! and fails only when they cannot be read. Real cluster only (cgroup v1 on the node).

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use serde_json::json;

use crate::colocation::read;
use crate::common;
use crate::dashboard::targets;
use crate::env::{Env, Wanted, find_dir};

const MI: f64 = 1024.0 * 1024.0;

/// `name`'s value in a text exposition (the first sample of that name).
fn sample(exposition: &str, name: &str) -> Option<f64> {
    exposition.lines().find_map(|l| {
        let rest = l.strip_prefix(name)?;
        let value = match rest.strip_prefix('{') {
            Some(labels) => labels.split_once("} ")?.1,
            None => rest.strip_prefix(' ')?,
        };
        value.split_whitespace().next()?.parse().ok()
    })
}

fn bytes(dir: &Path, file: &str) -> Option<f64> {
    read(&dir.join(file))?.parse().ok()
}

/// Prints one line per component pod: RSS, cgroup charge (kernel part), peak, chart limit.
async fn print_footprint(env: &Env, root: &Path, when: &str) {
    let targets = targets(&env.client).await;
    assert!(!targets.is_empty(), "no component pod found");
    println!("footprint ({when}): component, pod, RSS, cgroup charge (kernel part), peak, chart limit");
    for target in targets {
        let body = target
            .scrape()
            .await
            .unwrap_or_else(|| panic!("{} at {}: no /metrics", target.pod, target.addr));
        let rss = sample(&body, "process_resident_memory_bytes")
            .unwrap_or_else(|| panic!("{}: no process_resident_memory_bytes", target.pod));
        let dir = find_dir(&root.join("memory"), &format!("pod{}", target.uid), 4)
            .unwrap_or_else(|| panic!("{}: no memory cgroup pod{}", target.pod, target.uid));
        let usage = bytes(&dir, "memory.usage_in_bytes").expect("memory.usage_in_bytes");
        let kmem = bytes(&dir, "memory.kmem.usage_in_bytes");
        let peak = bytes(&dir, "memory.max_usage_in_bytes");
        assert!(
            rss > 0.0 && usage > 0.0,
            "{}: rss {rss}, usage {usage}",
            target.pod
        );
        let mib = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{:.1} MiB", v / MI));
        println!(
            "footprint: {:<24} {:<44} RSS {:>9}  charge {:>9} (kernel {:>9})  peak {:>9}  limit {}",
            target.app,
            target.pod,
            mib(Some(rss)),
            mib(Some(usage)),
            mib(kmem),
            mib(peak),
            mib(target.memory_limit.map(|l| l as f64)),
        );
    }
}

/// The node's cgroup v1 root on a real cluster, or why the footprint cannot be read here.
async fn real_cgroup_root(env: &Env) -> Result<PathBuf, String> {
    if !env.is_real() {
        return Err("the embedded components run in the test's own process".into());
    }
    env.first_node_cgroups().await.map(|(_, root)| root)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn component_memory_as_the_kernel_charges_it() {
    let env = Env::start(Wanted::default()).await;
    match real_cgroup_root(&env).await {
        Ok(root) => print_footprint(&env, &root, "installed").await,
        Err(reason) => println!("skipped: {reason}"),
    }
}

/// Label of the Nodes [`footprint_with_many_nodes`] creates (and deletes).
const FAKE_NODE_LABEL: &str = "koord-e2e.koordinator.sh/fake-node";

/// Deletes the fake Nodes on drop (their NodeSLOs and NodeMetrics are owned by them).
struct FakeNodes(kube::Client);

impl Drop for FakeNodes {
    fn drop(&mut self) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let nodes: Api<Node> = Api::all(self.0.clone());
        tokio::task::block_in_place(|| {
            handle.block_on(async {
                let lp = ListParams::default().labels(FAKE_NODE_LABEL);
                if let Err(e) = nodes.delete_collection(&DeleteParams::default(), &lp).await {
                    eprintln!("cleanup: deleting the fake Nodes: {e}");
                }
            })
        });
    }
}

/// The components' memory with `KOORD_E2E_FAKE_NODES` (default 5,000) Nodes in the cluster:
/// API objects only (tainted NoSchedule, no kubelet behind them), which koord-manager gives
/// a NodeSLO each and koord-webhook, koord-scheduler-extender and koord-manager cache. Prints
/// the footprint before, once every fake Node has its NodeSLO, and after they are deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "creates thousands of Nodes; a measurement for docs/benchmarks.md"]
async fn footprint_with_many_nodes() {
    let env = Env::start(Wanted::default()).await;
    let root = match real_cgroup_root(&env).await {
        Ok(root) => root,
        Err(reason) => {
            println!("skipped: {reason}");
            return;
        }
    };
    let count: usize = std::env::var("KOORD_E2E_FAKE_NODES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5_000);
    print_footprint(&env, &root, "before").await;
    let guard = FakeNodes(env.client.clone());
    let nodes: Api<Node> = Api::all(env.client.clone());
    let start = std::time::Instant::now();
    let created = futures::stream::iter(0..count)
        .map(|i| {
            let nodes = nodes.clone();
            async move {
                let node: Node = serde_json::from_value(json!({
                    "metadata": {"name": format!("fake-{i:05}"), "labels": {FAKE_NODE_LABEL: "true"}},
                    "spec": {"taints": [{"key": FAKE_NODE_LABEL, "value": "true", "effect": "NoSchedule"}]},
                    "status": {
                        "capacity": {"cpu": "32", "memory": "128Gi", "pods": "110"},
                        "allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110"}
                    }
                }))
                .unwrap();
                nodes.create(&PostParams::default(), &node).await.is_ok()
            }
        })
        .buffer_unordered(16)
        .filter(|ok| futures::future::ready(*ok))
        .count()
        .await;
    println!(
        "footprint: {created} of {count} Nodes created in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    let slos: Api<koord_api::NodeSLO> = Api::all(env.client.clone());
    let with_slo = common::wait_for(
        "a NodeSLO for every fake Node",
        Duration::from_secs(600),
        async || {
            let n = slos
                .list_metadata(&ListParams::default())
                .await
                .ok()?
                .items
                .iter()
                .filter(|s| s.metadata.name.as_deref().is_some_and(|n| n.starts_with("fake-")))
                .count();
            (n >= created).then_some(n)
        },
    )
    .await;
    println!(
        "footprint: {with_slo} NodeSLOs for the fake Nodes {:.1} s after the first was created",
        start.elapsed().as_secs_f64()
    );
    // The caches have settled when the components have seen every Node; give them a moment.
    tokio::time::sleep(Duration::from_secs(20)).await;
    print_footprint(&env, &root, &format!("{created} fake Nodes")).await;
    drop(guard);
    tokio::time::sleep(Duration::from_secs(30)).await;
    print_footprint(&env, &root, "fake Nodes deleted").await;
}

#[test]
fn exposition_samples_are_read_by_name() {
    let text =
        "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes 123\nx{a=\"b\"} 4\n";
    assert_eq!(sample(text, "process_resident_memory_bytes"), Some(123.0));
    assert_eq!(sample(text, "x"), Some(4.0));
    assert_eq!(sample(text, "y"), None);
    assert_eq!(sample(text, "process_resident_memory"), None);
}
