//! Embedded cluster (tier 4): koordlet's peak predictor on a simulated node whose pod is a real
//! process. A Prod pod requests two CPUs per host CPU plus two and uses about 0.05: after a few one-second trainings
//! (cold start off) the NodeMetric carries `prodReclaimableMetric` with most of the request
//! and `prodPeakMetric` with about the pod's small usage,
//! `/metrics` carries upstream's `koordlet_node_predicted_resource_reclaimable`, and the models
//! are checkpointed to the configured directory.
//!
//! Node CPU and memory are the host's (`/proc` is real), so the system usage the priority
//! predictor subtracts is whatever else the machine runs: the pod's memory request is sized
//! from the host's memory in use and its CPU request from the host's CPU count, so even a
//! fully busy host leaves a known part of the request reclaimable.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

mod common;

use std::time::Duration;

use clap::Parser;
use common::cluster::{cluster_with_namespace, host_used_bytes, unique};
use k8s_openapi::api::core::v1::Pod;
use koord_test_support::poll::wait_for;
use koord_testcluster::node::{FleetConfig, NodeSpec, SimulatedNodes};
use kube::api::{Api, PostParams};
use serde_json::json;

const MI: u64 = 1 << 20;

fn milli(q: &str) -> i64 {
    match q.strip_suffix('m') {
        Some(m) => m.parse().unwrap(),
        None => q.parse::<i64>().unwrap() * 1000,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn prod_pod_below_its_request_leaves_prod_reclaimable_in_the_node_metric() {
    let (cluster, client, ns) = cluster_with_namespace("predict").await;
    let name = unique("sim");
    // Memory request: twice what the host uses plus 1 GiB, so the system usage (the host's)
    // stays well below it; the node holds the request plus 4 GiB.
    let request_memory = 2 * host_used_bytes() + 1024 * MI;
    let host_cpus = std::fs::read_to_string("/proc/stat")
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .count() as i64;
    let request_cpu = 2 * host_cpus + 2;
    let spec = NodeSpec::new(&name)
        .with_resource("cpu", &(request_cpu + 4).to_string())
        .with_resource("memory", &(request_memory + 4096 * MI).to_string());
    let nodes = SimulatedNodes::start(client.clone(), vec![spec], FleetConfig::default())
        .await
        .unwrap();
    let node = nodes.node(&name).unwrap().clone();
    let node_metrics: Api<koord_api::NodeMetric> = Api::all(client.clone());
    node_metrics
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric",
                "metadata": {"name": name},
                "spec": {"metricCollectPolicy": {"aggregateDurationSeconds": 60, "reportIntervalSeconds": 30}}}))
            .unwrap(),
        )
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": "web", "labels": {"koordinator.sh/qosClass": "LS"},
                         "annotations": {"sim.koordinator.sh/memory": "20Mi", "sim.koordinator.sh/cpu-load": "0.05"}},
            "spec": {"containers": [{"name": "main", "image": "app",
                "resources": {"requests": {"cpu": request_cpu.to_string(), "memory": request_memory.to_string()},
                              "limits": {"cpu": request_cpu.to_string(), "memory": request_memory.to_string()}}}]}
        }))
        .unwrap(),
    )
    .await
    .unwrap();
    wait_for("web Running", Duration::from_secs(60), async || {
        let pod = pods.get("web").await.ok()?;
        (pod.status?.phase.as_deref() == Some("Running")).then_some(())
    })
    .await;

    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    cluster.write_kubeconfig(&kubeconfig).unwrap();
    let checkpoints = dir.path().join("checkpoints");
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
        format!("--metrics-addr={metrics_addr}"),
        "--health-addr=127.0.0.1:0".into(),
        "--enable-nri-runtime-hook=false".into(),
        "--prediction-cold-start-duration=0s".into(),
        "--prediction-training-interval=1s".into(),
        "--prediction-model-checkpoint-interval=2s".into(),
        format!("--prediction-checkpoint-filepath={}", checkpoints.display()),
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

    let reclaimable = wait_for(
        "prodReclaimableMetric in the NodeMetric",
        Duration::from_secs(120),
        async || {
            let status = node_metrics.get(&name).await.ok()?.status?;
            Some(status.prod_reclaimable_metric?.resource.resources)
        },
    )
    .await;
    println!("prodReclaimableMetric: {reclaimable:?}");
    let cpu = milli(&reclaimable["cpu"].0);
    let memory: i64 = reclaimable["memory"].0.parse().unwrap();
    // Below the request; at least the request minus (every host CPU busy as system usage, one
    // bucket high, plus 0.5 for the classes) × 1.1.
    let floor = request_cpu * 1000 - ((host_cpus as f64 * 1.05 + 0.5) * 1.1 * 1000.0) as i64;
    assert!(
        (floor..request_cpu * 1000).contains(&cpu),
        "cpu {cpu}m, floor {floor}m"
    );
    assert!(memory > 0 && memory < request_memory as i64, "memory {memory}");
    // The prod pods' peak comes with it: the pod's small usage (about 0.05 core, plus the
    // empty none class) with the margin, far below its request.
    let peak = node_metrics
        .get(&name)
        .await
        .unwrap()
        .status
        .and_then(|s| s.prod_peak_metric)
        .expect("prodPeakMetric next to prodReclaimableMetric")
        .resource
        .resources;
    println!("prodPeakMetric: {peak:?}");
    let peak_cpu = milli(&peak["cpu"].0);
    let peak_memory: i64 = peak["memory"].0.parse().unwrap();
    assert!((1..1000).contains(&peak_cpu), "peak cpu {peak_cpu}m");
    assert!(
        peak_memory > 0 && peak_memory < request_memory as i64,
        "peak memory {peak_memory}"
    );

    // The pod predictor alone: request − p95 (about 0.05, however busy the host is, well
    // below 0.4) × 1.1.
    let body = koord_test_support::scrape(metrics_addr).await.unwrap();
    let series = |predictor: &str, resource: &str, unit: &str| {
        format!(
            "koordlet_node_predicted_resource_reclaimable{{node=\"{name}\",predictor=\"{predictor}\",resource=\"{resource}\",unit=\"{unit}\"}}"
        )
    };
    let pod_cpu =
        koord_test_support::sample(&body, &series("podReclaimablePredictor", "cpu", "core")).unwrap();
    let request = request_cpu as f64;
    assert!(
        (request - 0.5..request).contains(&pod_cpu),
        "pod predictor cpu {pod_cpu}\n{body}"
    );
    let min_cpu = koord_test_support::sample(&body, &series("minPredictor", "cpu", "core")).unwrap();
    assert!(min_cpu <= pod_cpu, "{body}");
    assert!(
        koord_test_support::sample(&body, "koordlet_prediction_models").unwrap() >= 4.0,
        "{body}"
    );

    // The models are checkpointed (web, koord-prod, none, sys at least).
    let file = checkpoints.join("prediction-models.json");
    let saved = wait_for("a prediction checkpoint", Duration::from_secs(20), async || {
        let body = std::fs::read(&file).ok()?;
        serde_json::from_slice::<serde_json::Value>(&body).ok()
    })
    .await;
    let models = saved["models"].as_object().unwrap();
    let uid = pods.get("web").await.unwrap().metadata.uid.unwrap();
    for key in [
        uid.as_str(),
        "node/sys",
        "node/priority-koord-prod",
        "node/priority-none",
    ] {
        assert!(models.contains_key(key), "{key} in {:?}", models.keys());
    }

    let _ = stop.send(());
    agent.await.unwrap();
    drop(nodes);
}
