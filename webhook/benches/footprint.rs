//! The whole koord-webhook process's memory with a large cluster cached (default 5,000 Nodes
//! and 1,000 Namespaces, shaped as a real cluster holds them: a dozen labels, the kubelet's
//! annotations, status with conditions, addresses, node info and 40 images, and the
//! `managedFields` of two writers). Prints figures, asserts nothing:
//! - RSS and peak RSS (`/proc/<pid>/status`);
//! - what the process's own cgroup v1 memory controller charged (user and kernel memory; the
//!   process runs in it from its first instruction), where `/sys/fs/cgroup/memory` is writable.
//!
//! Three measurements, as the manager's `embedded_cluster`: a webhook with nothing to cache,
//! the same process after the Nodes and Namespaces arrived by watch, and a fresh process that
//! lists them at start (per node = difference / (nodes + namespaces)).
//!
//! Run: `cargo bench -p koord-webhook --bench footprint`
//! (`KOORD_BENCH_NODES`, `KOORD_BENCH_NAMESPACES` change the scale).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::{
    net::SocketAddr,
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{Namespace, Node};
use koord_test_support::cgroup::CgroupV1Tree;
use koord_test_support::footprint::{CgroupMemory, ProcessMemory};
use koord_testcluster::{ClusterOptions, TestCluster};
use kube::{
    Api, Client,
    api::{Patch, PatchParams},
};
use serde_json::{Value, json};

const NS: &str = "koordinator-system";
const PARALLEL: usize = 32;
const MIB: f64 = 1024.0 * 1024.0;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A Node's metadata as a kubelet-registered node of a cloud cluster carries it.
fn node_metadata(n: usize) -> Value {
    let name = format!("node-{n:05}.eu-west-1.compute.internal");
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name,
            "labels": {
                "beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux",
                "kubernetes.io/hostname": name,
                "node.kubernetes.io/instance-type": "m5.8xlarge",
                "beta.kubernetes.io/instance-type": "m5.8xlarge",
                "topology.kubernetes.io/region": "eu-west-1",
                "topology.kubernetes.io/zone": format!("eu-west-1{}", ["a", "b", "c"][n % 3]),
                "failure-domain.beta.kubernetes.io/region": "eu-west-1",
                "failure-domain.beta.kubernetes.io/zone": format!("eu-west-1{}", ["a", "b", "c"][n % 3]),
                "node-pool": format!("pool-{}", n % 8),
                "node.koordinator.sh/colocation": "true"},
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                "csi.volume.kubernetes.io/nodeid": format!(r#"{{"ebs.csi.aws.com":"i-0{n:016x}"}}"#),
                "kubeadm.alpha.kubernetes.io/cri-socket": "/run/containerd/containerd.sock"}}})
}

/// The status the kubelet writes.
fn node_status(n: usize) -> Value {
    let images: Vec<Value> = (0..40)
        .map(|i| {
            json!({"names": [
                format!("registry.example.com/team-{}/service-{i}@sha256:{:064x}", i % 5, n * 40 + i),
                format!("registry.example.com/team-{}/service-{i}:v1.{i}.{}", i % 5, n % 10)],
                "sizeBytes": 50_000_000 + i * 1_000_000})
        })
        .collect();
    let condition = |kind: &str, status: &str, reason: &str, message: &str| {
        json!({"type": kind, "status": status, "reason": reason, "message": message,
            "lastHeartbeatTime": "2026-11-28T10:00:00Z", "lastTransitionTime": "2026-11-20T08:00:00Z"})
    };
    let capacity = json!({"cpu": "32", "memory": "130Gi", "pods": "110",
        "ephemeral-storage": "104845292Ki", "hugepages-1Gi": "0", "hugepages-2Mi": "0",
        "attachable-volumes-aws-ebs": "25"});
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": format!("node-{n:05}.eu-west-1.compute.internal")},
        "status": {
            "capacity": capacity, "allocatable": capacity,
            "conditions": [
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                condition("Ready", "True", "KubeletReady", "kubelet is posting ready status")],
            "addresses": [
                {"type": "InternalIP", "address": format!("10.{}.{}.{}", n / 65536 % 256, n / 256 % 256, n % 256)},
                {"type": "Hostname", "address": format!("node-{n:05}.eu-west-1.compute.internal")},
                {"type": "InternalDNS", "address": format!("node-{n:05}.eu-west-1.compute.internal")}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"machineID": format!("{n:032x}"), "systemUUID": format!("ec2{n:029x}"),
                "bootID": format!("{:032x}", n * 7919), "kernelVersion": "6.1.0-18-amd64",
                "osImage": "Debian GNU/Linux 12 (bookworm)", "containerRuntimeVersion": "containerd://1.7.24",
                "kubeletVersion": "v1.20.15", "kubeProxyVersion": "v1.20.15",
                "operatingSystem": "linux", "architecture": "amd64"},
            "images": images}})
}

fn namespace(n: usize) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": format!("team-{n:04}"),
            "labels": {"kubernetes.io/metadata.name": format!("team-{n:04}"), "team": format!("t{}", n % 50),
                "koordinator.sh/enable-colocation": if n.is_multiple_of(2) { "true" } else { "false" }},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "x".repeat(300)}}})
}

async fn load(client: &Client, nodes: usize, namespaces: usize) {
    let node_api: Api<Node> = Api::all(client.clone());
    stream::iter(0..nodes)
        .map(|n| {
            let node_api = &node_api;
            async move {
                let name = format!("node-{n:05}.eu-west-1.compute.internal");
                node_api
                    .patch(&name, &PatchParams::apply("kubelet").force(), &Patch::Apply(node_metadata(n)))
                    .await?;
                node_api
                    .patch_status(&name, &PatchParams::apply("kubelet").force(), &Patch::Apply(node_status(n)))
                    .await?;
                let labels = json!({"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": name, "labels": {"node.kubernetes.io/exclude-from-external-load-balancers": "true"}}});
                node_api
                    .patch(&name, &PatchParams::apply("node-labeller").force(), &Patch::Apply(labels))
                    .await
                    .map(|_| ())
            }
        })
        .buffer_unordered(PARALLEL)
        .try_collect::<Vec<()>>()
        .await
        .unwrap();
    let ns_api: Api<Namespace> = Api::all(client.clone());
    stream::iter(0..namespaces)
        .map(|n| {
            let ns_api = &ns_api;
            async move {
                ns_api
                    .patch(
                        &format!("team-{n:04}"),
                        &PatchParams::apply("kubectl-client-side-apply").force(),
                        &Patch::Apply(namespace(n)),
                    )
                    .await
                    .map(|_| ())
            }
        })
        .buffer_unordered(PARALLEL)
        .try_collect::<Vec<()>>()
        .await
        .unwrap();
}

struct Webhook {
    child: Child,
    pid: u32,
    health: SocketAddr,
    cgroup: Option<std::path::PathBuf>,
}

impl Webhook {
    /// Starts koord-webhook, inside `tree`'s cgroup `rel` when there is a tree.
    fn start(kubeconfig: &Path, tree: Option<&CgroupV1Tree>, rel: &str) -> Webhook {
        let program = Path::new(env!("CARGO_BIN_EXE_koord-webhook"));
        let health = koord_test_support::free_loopback_addr().unwrap();
        let (mut command, cgroup) = match tree {
            Some(tree) => {
                tree.mkdir(rel).unwrap();
                (tree.command_in(rel, program), Some(tree.path("memory", rel)))
            }
            None => (Command::new(program), None),
        };
        let child: Child = command
            .args(["--kubeconfig", kubeconfig.to_str().unwrap()])
            .args(["--port", "0", "--bind-address", "127.0.0.1"])
            .args(["--health-addr", &health.to_string()])
            .args(["--metrics-addr", &health.to_string()])
            .args(["--namespace", NS])
            .env("RUST_LOG", "error")
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id();
        Webhook {
            child,
            pid,
            health,
            cgroup,
        }
    }

    async fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            if let Ok(response) = http_get(self.health, "/readyz").await
                && response.starts_with("HTTP/1.1 200")
            {
                return;
            }
            assert!(Instant::now() < deadline, "koord-webhook not ready after 300 s");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until RSS has not grown for 3 s (the watch events are in), then reads the figures.
    async fn settled(&self) -> (ProcessMemory, Option<CgroupMemory>) {
        let mut last = ProcessMemory::of(self.pid).unwrap().rss;
        let mut quiet = 0;
        while quiet < 3 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let now = ProcessMemory::of(self.pid).unwrap().rss;
            quiet = if now <= last + 64 * 1024 { quiet + 1 } else { 0 };
            last = now;
        }
        let process = ProcessMemory::of(self.pid).unwrap();
        let cgroup = self.cgroup.as_ref().map(|dir| CgroupMemory::of(dir).unwrap());
        (process, cgroup)
    }
}

impl Drop for Webhook {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A plain HTTP/1.1 GET over a TCP stream (no client crate needed for one probe).
async fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes())
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    Ok(response)
}

fn line(what: &str, (process, cgroup): &(ProcessMemory, Option<CgroupMemory>)) {
    let mut text = format!(
        "  {what}: RSS {:.1} MiB (peak {:.1} MiB)",
        process.rss as f64 / MIB,
        process.peak_rss as f64 / MIB
    );
    if let Some(cgroup) = cgroup {
        text.push_str(&format!(
            "; cgroup {:.1} MiB (peak {:.1} MiB; kernel {:.1} MiB, anonymous {:.1} MiB, page cache {:.1} MiB)",
            cgroup.usage as f64 / MIB,
            cgroup.peak_usage as f64 / MIB,
            cgroup.kernel as f64 / MIB,
            cgroup.anonymous as f64 / MIB,
            cgroup.cache as f64 / MIB
        ));
    }
    println!("{text}");
}

fn per_object(with: u64, without: u64, objects: usize) -> String {
    format!(
        "{:.0} B",
        with.saturating_sub(without) as f64 / objects.max(1) as f64
    )
}

#[tokio::main]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let nodes = env_usize("KOORD_BENCH_NODES", 5_000);
    let namespaces = env_usize("KOORD_BENCH_NAMESPACES", 1_000);
    println!("koord-webhook footprint: {nodes} Nodes, {namespaces} Namespaces");
    let tree = match CgroupV1Tree::new(&["memory"]) {
        Ok(tree) => Some(tree),
        Err(reason) => {
            println!("  cgroup figures skipped: {reason}");
            None
        }
    };

    let cluster = TestCluster::start(ClusterOptions::default()).await.unwrap();
    let crds = concat!(env!("CARGO_MANIFEST_DIR"), "/../charts/koordinator/crds");
    cluster.install_crds_from_dir(crds).await.unwrap();
    cluster
        .apply_object(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}))
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
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    cluster.write_kubeconfig(&kubeconfig).unwrap();
    let client = cluster.client().unwrap();

    // 1. Nothing to cache.
    let empty = Webhook::start(&kubeconfig, tree.as_ref(), "empty");
    empty.wait_ready().await;
    let baseline = empty.settled().await;
    line("ready, empty cluster", &baseline);

    // 2. The objects arrive by watch.
    let start = Instant::now();
    load(&client, nodes, namespaces).await;
    println!(
        "  loaded {nodes} Nodes and {namespaces} Namespaces in {:?}",
        start.elapsed()
    );
    let watched = empty.settled().await;
    line("same process, objects arrived by watch", &watched);
    drop(empty);

    // 3. A fresh process lists them at start.
    let fresh = Webhook::start(&kubeconfig, tree.as_ref(), "fresh");
    let start = Instant::now();
    fresh.wait_ready().await;
    println!(
        "  fresh process ready (caches synced) after {:?}",
        start.elapsed()
    );
    let listed = fresh.settled().await;
    line("fresh process, objects listed at start", &listed);
    drop(fresh);

    let objects = nodes + namespaces;
    println!(
        "  per cached object: RSS {} (watched), {} (listed)",
        per_object(watched.0.rss, baseline.0.rss, objects),
        per_object(listed.0.rss, baseline.0.rss, objects)
    );
    if let (Some(base), Some(watched), Some(listed)) = (baseline.1, watched.1, listed.1) {
        println!(
            "  per cached object: cgroup {} (watched), {} (listed)",
            per_object(watched.usage, base.usage, objects),
            per_object(listed.usage, base.usage, objects)
        );
    }
    drop(tree);
}
