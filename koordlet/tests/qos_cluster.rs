//! Embedded cluster (tier 4): koordlet runs in-process against the embedded API server and a
//! simulated node whose pods are real processes in real cgroups; the QoS strategies act
//! through the API (Eviction, Events) and the node's cgroups.
//!
//! Node memory on a simulated node is the host's (`/proc/meminfo`: the pods' processes are
//! real), so the memory test sizes the Node's memory capacity and the NodeSLO threshold from
//! what `/proc/meminfo` says at the time, with a wide margin on both sides.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

mod common;

use common::cluster::{cluster_with_namespace, host_used_bytes, unique};
use koord_test_support::poll::wait_for;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use k8s_openapi::api::core::v1::{Event, Pod};
use koord_testcluster::TestCluster;
use koord_testcluster::node::{FleetConfig, NodeInfo, NodeSpec, SimulatedNodes};
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};

/// One scenario at a time: they measure node memory and CPU of a shared machine.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
const MI: u64 = 1 << 20;

struct Env {
    _cluster: TestCluster,
    client: kube::Client,
    nodes: SimulatedNodes,
    node: NodeInfo,
    ns: String,
    /// koordlet's `/metrics`.
    metrics_addr: std::net::SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    agent: Option<tokio::task::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl Drop for Env {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(agent) = self.agent.take() {
            agent.abort();
        }
    }
}

async fn start(node_memory: u64, gates: &str) -> Env {
    let (cluster, client, ns) = cluster_with_namespace("qos").await;
    let name = unique("sim");
    let spec = NodeSpec::new(&name)
        .with_resource("memory", &node_memory.to_string())
        .with_resource("kubernetes.io/batch-cpu", "4000")
        .with_resource("kubernetes.io/batch-memory", "8Gi");
    let nodes = SimulatedNodes::start(client.clone(), vec![spec], FleetConfig::default())
        .await
        .unwrap();
    let node = nodes.node(&name).unwrap().clone();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    cluster.write_kubeconfig(&kubeconfig).unwrap();
    let metrics_addr = koord_test_support::free_loopback_addr().unwrap();
    let args = koordlet::cli::Args::try_parse_from([
        "koordlet".to_string(),
        format!("--node-name={name}"),
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--cgroup-root={}", node.cgroup_root.display()),
        format!("--proc-root={}", node.proc_root.display()),
        "--cgroup-driver=cgroupfs".into(),
        "--pods-source=kubelet".into(),
        format!("--kubelet-url=http://127.0.0.1:{}", node.kubelet_port),
        "--collect-interval=1s".into(),
        format!("--feature-gates={gates}"),
        format!("--metrics-addr={metrics_addr}"),
        "--health-addr=127.0.0.1:0".into(),
        "--enable-nri-runtime-hook=false".into(),
    ])
    .unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let agent = tokio::spawn(async move {
        let shutdown = async move {
            let _ = stopped.await;
        };
        if let Err(e) = koordlet::agent::run_agent(args.agent, shutdown).await {
            panic!("koordlet failed: {e}");
        }
    });
    Env {
        _cluster: cluster,
        client,
        nodes,
        node,
        ns,
        metrics_addr,
        stop: Some(stop),
        agent: Some(agent),
        _dir: dir,
    }
}

impl Env {
    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    async fn node_slo(&self, spec: Value) {
        let api: Api<koord_api::NodeSLO> = Api::all(self.client.clone());
        let slo = serde_json::from_value(json!({
            "apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO",
            "metadata": {"name": self.node.name}, "spec": spec,
        }))
        .unwrap();
        match api.get_opt(&self.node.name).await.unwrap() {
            Some(old) => {
                let mut slo: koord_api::NodeSLO = slo;
                slo.metadata.resource_version = old.metadata.resource_version;
                api.replace(&self.node.name, &PostParams::default(), &slo)
                    .await
                    .unwrap();
            }
            None => {
                api.create(&PostParams::default(), &slo).await.unwrap();
            }
        }
    }

    async fn create_pod(&self, pod: Value) -> String {
        let pod: Pod = serde_json::from_value(pod).unwrap();
        let created = self.pods().create(&PostParams::default(), &pod).await.unwrap();
        created.metadata.uid.unwrap()
    }

    /// Waits until the pod runs (and its processes exist); returns its container's cgroup dir
    /// relative to the controller root.
    async fn wait_running(&self, name: &str) -> String {
        let pod = wait_for(&format!("{name} Running"), Duration::from_secs(60), async || {
            let pod = self.pods().get(name).await.ok()?;
            (pod.status.as_ref()?.phase.as_deref() == Some("Running")).then_some(pod)
        })
        .await;
        let uid = pod.metadata.uid.clone().unwrap();
        let status = pod.status.unwrap();
        let id = status.container_statuses.unwrap()[0]
            .container_id
            .clone()
            .unwrap();
        let hash = id.strip_prefix("containerd://").unwrap().to_string();
        let qos = match status.qos_class.as_deref() {
            Some("BestEffort") => "kubepods/besteffort",
            Some("Burstable") => "kubepods/burstable",
            _ => "kubepods",
        };
        wait_for(
            &format!("{name} processes"),
            Duration::from_secs(30),
            async || (!self.nodes.pod_pids(&uid).is_empty()).then_some(()),
        )
        .await;
        format!("{qos}/pod{uid}/{hash}")
    }

    fn cpu_file(&self, dir: &str, file: &str) -> PathBuf {
        self.node.cgroup_root.join("cpu").join(dir).join(file)
    }

    async fn events(&self, pod: &str) -> Vec<Event> {
        Api::<Event>::namespaced(self.client.clone(), &self.ns)
            .list(&ListParams::default().fields(&format!("involvedObject.name={pod}")))
            .await
            .map(|l| l.items)
            .unwrap_or_default()
    }
}

fn be_pod(name: &str, memory: &str, labels: Value) -> Value {
    json!({
        "metadata": {"name": name, "labels": labels,
                     "annotations": {"sim.koordinator.sh/memory": memory, "sim.koordinator.sh/cpu-load": "0.05"}},
        "spec": {"containers": [{"name": "main", "image": "batch",
            "resources": {"requests": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "1Gi"},
                          "limits": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "1Gi"}}}]}
    })
}

fn ls_pod(name: &str, app: &str) -> Value {
    json!({
        "metadata": {"name": name, "labels": {"koordinator.sh/qosClass": "LS", "app": app},
                     "annotations": {"sim.koordinator.sh/memory": "20Mi", "sim.koordinator.sh/cpu-load": "0.05"}},
        "spec": {"containers": [{"name": "main", "image": "app",
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}}}]}
    })
}

fn reasons(events: &[Event]) -> Vec<(String, String)> {
    events
        .iter()
        .map(|e| {
            (
                e.reason.clone().unwrap_or_default(),
                e.message.clone().unwrap_or_default(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_hungry_be_pod_is_evicted_with_an_event_and_ls_pods_stay() {
    let _serial = SERIAL.lock().await;
    // Node memory capacity: what the host uses now plus 1.5 GiB, so the BE pod's 700 MiB
    // moves node usage by about a third of the capacity.
    let capacity = host_used_bytes() + 1536 * MI;
    let env = start(capacity, "BEMemoryEvict=true").await;
    env.create_pod(ls_pod("web", "web")).await;
    env.create_pod(be_pod(
        "be-small",
        "20Mi",
        json!({"koordinator.sh/qosClass": "BE"}),
    ))
    .await;
    env.wait_running("web").await;
    env.wait_running("be-small").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Threshold halfway between usage now and usage with the hungry pod.
    let used = host_used_bytes();
    let threshold = (used + 350 * MI) * 100 / capacity;
    println!("capacity {capacity} used {used} threshold {threshold}%");
    assert!(threshold < 95, "host memory moved too much to set a threshold");
    env.node_slo(
        json!({"resourceUsedThresholdWithBE": {"enable": true, "memoryEvictThresholdPercent": threshold}}),
    )
    .await;
    // Below the threshold nothing happens.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(env.pods().get_opt("be-small").await.unwrap().is_some());
    env.create_pod(be_pod(
        "be-hungry",
        "700Mi",
        json!({"koordinator.sh/qosClass": "BE"}),
    ))
    .await;
    env.wait_running("be-hungry").await;
    wait_for("be-hungry evicted", Duration::from_secs(60), async || {
        env.pods()
            .get_opt("be-hungry")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    let events = wait_for("evictPodSuccess Event", Duration::from_secs(10), async || {
        let events = reasons(&env.events("be-hungry").await);
        events
            .iter()
            .any(|(r, _)| r == "evictPodSuccess")
            .then_some(events)
    })
    .await;
    let (_, message) = events.iter().find(|(r, _)| r == "evictPodSuccess").unwrap();
    assert!(
        message.contains("EvictPodByNodeMemoryUsage") && message.contains("node memory usage"),
        "{message}"
    );
    assert_upstream_series(&env).await;
    // The LS pod and the small BE pod (usage back below the threshold) stay. Node usage is the
    // host's: when other work on the host pushes it over the threshold again within the next
    // cool-down, evicting the small pod is right, and only its survival goes unchecked.
    let mut peak = 0;
    for _ in 0..24 {
        peak = peak.max(host_used_bytes());
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(env.pods().get_opt("web").await.unwrap().is_some());
    let small_stays = env.pods().get_opt("be-small").await.unwrap().is_some();
    let peak_percent = peak * 100 / capacity;
    if peak_percent + 1 >= threshold {
        println!(
            "skipped: host memory reached {peak_percent}% of the node (threshold {threshold}%) after the eviction; be-small stayed: {small_stays}"
        );
    } else {
        assert!(small_stays, "be-small evicted at a host peak of {peak_percent}%");
    }
    assert!(reasons(&env.events("web").await).is_empty());
}

/// koordlet's `/metrics` after the memory eviction: upstream's series with what this node
/// measured and decided, the build and the process.
async fn assert_upstream_series(env: &Env) {
    use koord_test_support::sample;
    let body = koord_test_support::scrape(env.metrics_addr).await.unwrap();
    let node = &env.node.name;
    let series = |name: &str, labels: &str| format!("koordlet_{name}{{node=\"{node}\"{labels}}}");
    let evictions = sample(
        &body,
        &series("pod_eviction", ",reason=\"EvictPodByNodeMemoryUsage\""),
    );
    assert!(evictions.is_some_and(|n| n >= 1.0), "{body}");
    let memory = sample(&body, &series("node_used_memory_bytes", "")).unwrap();
    assert!(memory > 100.0 * MI as f64, "node memory {memory}");
    let cpu = sample(&body, &series("node_used_cpu_cores", "")).unwrap();
    assert!(cpu >= 0.0, "node cpu {cpu}");
    let batch_cpu = series(
        "node_resource_allocatable",
        ",resource=\"kubernetes.io/batch-cpu\",unit=\"integer\"",
    );
    assert_eq!(sample(&body, &batch_cpu), Some(4000.0), "{body}");
    let started = sample(&body, &series("start_time", "")).unwrap();
    assert!(started > 1.6e9, "{started}");
    let build = format!("koordlet_build_info{{version=\"{}\"}}", env!("CARGO_PKG_VERSION"));
    assert_eq!(sample(&body, &build), Some(1.0), "{body}");
    assert!(sample(&body, "process_resident_memory_bytes").unwrap() > 1e6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pdb_blocks_eviction_and_is_reported_as_evict_pod_fail() {
    let _serial = SERIAL.lock().await;
    let env = start(8 << 30, "BEMemoryEvict=true").await;
    env.create_pod(be_pod(
        "be-protected",
        "20Mi",
        json!({"koordinator.sh/qosClass": "BE", "app": "protected"}),
    ))
    .await;
    env.wait_running("be-protected").await;
    let pdbs: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
        Api::namespaced(env.client.clone(), &env.ns);
    pdbs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "protect"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "protected"}}}}))
        .unwrap(),
    )
    .await
    .unwrap();
    // Threshold 1 %: node memory is always over it.
    env.node_slo(json!({"resourceUsedThresholdWithBE": {"enable": true, "memoryEvictThresholdPercent": 1, "memoryEvictLowerPercent": 0}}))
        .await;
    let events = wait_for("evictPodFail Event", Duration::from_secs(30), async || {
        let events = reasons(&env.events("be-protected").await);
        events.iter().any(|(r, _)| r == "evictPodFail").then_some(events)
    })
    .await;
    let (_, message) = events.iter().find(|(r, _)| r == "evictPodFail").unwrap();
    assert!(message.contains("EvictPodByNodeMemoryUsage"), "{message}");
    assert!(events.iter().all(|(r, _)| r != "evictPodSuccess"), "{events:?}");
    let pod = env.pods().get("be-protected").await.unwrap();
    assert!(pod.metadata.deletion_timestamp.is_none());
}

/// A pod of `qos` with `spec.priority`, opted in to the node-level evictions or not.
fn prioritized_pod(name: &str, qos: &str, priority: i32, opted_in: bool) -> Value {
    let mut labels = json!({"koordinator.sh/qosClass": qos});
    if opted_in {
        labels["koordinator.sh/eviction-enabled"] = json!("true");
    }
    json!({
        "metadata": {"name": name, "labels": labels,
                     "annotations": {"sim.koordinator.sh/memory": "20Mi", "sim.koordinator.sh/cpu-load": "0.05"}},
        "spec": {"priority": priority, "containers": [{"name": "main", "image": "app",
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}}}]}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_evict_takes_only_opted_in_pods_at_or_below_the_priority_threshold() {
    let _serial = SERIAL.lock().await;
    let env = start(8 << 30, "MemoryEvict=true").await;
    let pods = [
        ("ls-opted-in", "LS", 5000, true),
        ("ls-important", "LS", 9500, true),
        ("ls-plain", "LS", 0, false),
        ("be-plain", "BE", 0, false),
    ];
    for (name, qos, priority, opted_in) in pods {
        env.create_pod(prioritized_pod(name, qos, priority, opted_in))
            .await;
    }
    for (name, ..) in pods {
        env.wait_running(name).await;
    }
    // Threshold 1 %, lower 0: node memory is always over it and the release is everything;
    // only the opted-in pod at or below priority 6000 may go (BEMemoryEvict is off).
    env.node_slo(json!({"resourceUsedThresholdWithBE": {"enable": true,
        "memoryEvictThresholdPercent": 1, "memoryEvictLowerPercent": 0,
        "evictEnabledPriorityThreshold": 6000}}))
        .await;
    wait_for("ls-opted-in evicted", Duration::from_secs(30), async || {
        env.pods()
            .get_opt("ls-opted-in")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    let events = wait_for("evictPodSuccess Event", Duration::from_secs(10), async || {
        let events = reasons(&env.events("ls-opted-in").await);
        events
            .iter()
            .any(|(r, _)| r == "evictPodSuccess")
            .then_some(events)
    })
    .await;
    let (_, message) = events.iter().find(|(r, _)| r == "evictPodSuccess").unwrap();
    assert!(
        message.contains("EvictPodByMemoryUsedThresholdPercent")
            && message.contains("eviction priority 0, priority 5000"),
        "{message}"
    );
    // Two more rounds past the 4 s cool-down: the others are never picked.
    tokio::time::sleep(Duration::from_secs(6)).await;
    for name in ["ls-important", "ls-plain", "be-plain"] {
        assert!(
            env.pods().get_opt(name).await.unwrap().is_some(),
            "{name} evicted"
        );
        assert!(reasons(&env.events(name).await).is_empty(), "{name}");
    }
    let body = koord_test_support::scrape(env.metrics_addr).await.unwrap();
    let series = format!(
        "koordlet_pod_eviction{{node=\"{}\",reason=\"EvictPodByMemoryUsedThresholdPercent\"}}",
        env.node.name
    );
    assert_eq!(koord_test_support::sample(&body, &series), Some(1.0), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pod_level_burst_strategy_reaches_only_the_matching_pod() {
    let _serial = SERIAL.lock().await;
    let env = start(8 << 30, "").await;
    env.create_pod(ls_pod("payment", "payment")).await;
    env.create_pod(ls_pod("web", "web")).await;
    let payment = env.wait_running("payment").await;
    let web = env.wait_running("web").await;
    // The kubelet sets CFS quotas from CPU limits (1 core); the simulated node does not.
    for dir in [&payment, &web] {
        let pod_dir = dir.rsplit_once('/').unwrap().0;
        std::fs::write(env.cpu_file(pod_dir, "cpu.cfs_quota_us"), "100000").unwrap();
        std::fs::write(env.cpu_file(dir, "cpu.cfs_quota_us"), "100000").unwrap();
    }
    env.node_slo(json!({"cpuBurstStrategy": {
        "policy": "none",
        "podStrategies": [{"namespace": env.ns, "podSelector": {"matchLabels": {"app": "payment"}},
                           "overridePod": true,
                           "cpuBurstConfig": {"policy": "cpuBurstOnly", "cpuBurstPercent": 100}}]}}))
        .await;
    let read = |dir: &str| {
        std::fs::read_to_string(env.cpu_file(dir, "cpu.cfs_burst_us"))
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    };
    wait_for("payment burst", Duration::from_secs(30), async || {
        (read(&payment) == "100000").then_some(())
    })
    .await;
    assert_eq!(read(payment.rsplit_once('/').unwrap().0), "100000");
    assert_eq!(read(&web), "0");
    assert_eq!(read(web.rsplit_once('/').unwrap().0), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn suppressed_busy_be_pod_is_evicted_by_satisfaction() {
    let _serial = SERIAL.lock().await;
    // The test plays suppress itself (a fixed BE quota) so satisfaction is known exactly: the
    // fast suppress loop is switched off with its gate.
    let env = start(8 << 30, "BECPUEvict=true,BECPUSuppress=false").await;
    env.create_pod(ls_pod("web", "web")).await;
    let mut busy = be_pod("be-busy", "20Mi", json!({"koordinator.sh/qosClass": "BE"}));
    busy["metadata"]["annotations"]["sim.koordinator.sh/cpu-load"] = json!("1");
    busy["spec"]["containers"][0]["resources"] = json!({
        "requests": {"kubernetes.io/batch-cpu": "2000", "kubernetes.io/batch-memory": "1Gi"},
        "limits": {"kubernetes.io/batch-cpu": "2000", "kubernetes.io/batch-memory": "1Gi"}});
    env.create_pod(busy).await;
    env.wait_running("web").await;
    env.wait_running("be-busy").await;
    // Suppress squeezes BE to half a core: satisfaction 500m / 2000m.
    std::fs::write(env.cpu_file("kubepods/besteffort", "cpu.cfs_quota_us"), "50000").unwrap();
    env.node_slo(json!({"resourceUsedThresholdWithBE": {
        "enable": true, "cpuSuppressPolicy": "cfsQuota",
        "cpuEvictBESatisfactionLowerPercent": 60, "cpuEvictBESatisfactionUpperPercent": 80,
        "cpuEvictBEUsageThresholdPercent": 90, "cpuEvictTimeWindowSeconds": 3}}))
        .await;
    // Upstream's rule: no satisfaction eviction before one cool-down (20 s) after start.
    wait_for("be-busy evicted", Duration::from_secs(90), async || {
        env.pods()
            .get_opt("be-busy")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    let events = wait_for("evictPodSuccess Event", Duration::from_secs(10), async || {
        let events = reasons(&env.events("be-busy").await);
        events
            .iter()
            .any(|(r, _)| r == "evictPodSuccess")
            .then_some(events)
    })
    .await;
    let (_, message) = events.iter().find(|(r, _)| r == "evictPodSuccess").unwrap();
    assert!(
        message.contains("EvictPodByBECPUSatisfaction") && message.contains("satisfaction 0.2"),
        "{message}"
    );
    assert!(env.pods().get_opt("web").await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn be_quota_follows_the_node_cpu_normalization_ratio() {
    let _serial = SERIAL.lock().await;
    let env = start(8 << 30, "").await;
    env.create_pod(be_pod(
        "be-batch",
        "20Mi",
        json!({"koordinator.sh/qosClass": "BE"}),
    ))
    .await;
    let container = env.wait_running("be-batch").await;
    let pod = container.rsplit_once('/').unwrap().0.to_string();
    let quota = |dir: &str| {
        std::fs::read_to_string(env.cpu_file(dir, "cpu.cfs_quota_us"))
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    };
    // 500 batch milli-cores: 50000 µs per 100 ms.
    wait_for("BE quota from batch-cpu", Duration::from_secs(30), async || {
        (quota(&container) == "50000" && quota(&pod) == "50000").then_some(())
    })
    .await;
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(env.client.clone());
    let annotate = |ratio: &str| json!({"metadata": {"annotations": {"node.koordinator.sh/cpu-normalization-ratio": ratio}}});
    let patch = |ratio: &'static str| {
        let nodes = nodes.clone();
        let name = env.node.name.clone();
        let body = annotate(ratio);
        async move {
            nodes
                .patch(
                    &name,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(body),
                )
                .await
                .unwrap();
        }
    };
    // The manager marks the node's CPUs 1.25 times the baseline: ceil(50000 / 1.25) = 40000.
    patch("1.25").await;
    wait_for(
        "quota divided by the ratio",
        Duration::from_secs(30),
        async || (quota(&container) == "40000" && quota(&pod) == "40000").then_some(()),
    )
    .await;
    // A ratio that is not one (below 1) counts as 1: back to 50000.
    patch("0.5").await;
    wait_for("bad ratio ignored", Duration::from_secs(30), async || {
        (quota(&container) == "50000" && quota(&pod) == "50000").then_some(())
    })
    .await;
}
