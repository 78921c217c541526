//! Simulated nodes against the embedded API server: a pod created through the API is bound,
//! runs as a process in its cgroup, reports Running with a container ID, is listed by the
//! kubelet `/pods` endpoint, and on delete its process stops and its cgroups go.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use koord_test_support::wait_for;
use koord_testcluster::node::{FleetConfig, NodeSpec, SimulatedNodes};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

/// GET over plain HTTP/1.0 (the endpoint is loopback HTTP), returning the body.
fn http_get(url: &str) -> String {
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_once('/').unwrap();
    let mut stream = std::net::TcpStream::connect(host).unwrap();
    write!(stream, "GET /{path} HTTP/1.0\r\nHost: {host}\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    assert!(
        head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
        "{head}"
    );
    body.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_is_bound_runs_is_listed_and_stops_on_delete() {
    let (_cluster, client, ns) = common::cluster_with_namespace().await;
    let node_name = common::unique("sim");
    let spec = NodeSpec::new(&node_name)
        .with_resource("kubernetes.io/batch-cpu", "4000")
        .with_resource("kubernetes.io/batch-memory", "4Gi");
    let nodes = SimulatedNodes::start(client.clone(), vec![spec], FleetConfig::default())
        .await
        .unwrap();
    let run_dirs = nodes.cgroup_tree().run_dirs().to_vec();
    println!("cgroup mode: {:?}", nodes.cgroup_tree().mode());

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": "be-pod-demo", "labels": { "koordinator.sh/qosClass": "BE" },
                      "annotations": { "sim.koordinator.sh/cpu-load": "0.1" } },
        "spec": { "schedulerName": "default-scheduler", "containers": [{
            "name": "stress", "image": "polinux/stress", "command": ["stress"], "args": ["-c", "4", "--vm", "1"],
            "resources": { "limits": { "kubernetes.io/batch-cpu": "1k", "kubernetes.io/batch-memory": "64Mi" },
                           "requests": { "kubernetes.io/batch-cpu": "1k", "kubernetes.io/batch-memory": "64Mi" } } }] },
    }))
    .unwrap();
    let created = pods.create(&PostParams::default(), &pod).await.unwrap();
    let uid = created.metadata.uid.clone().unwrap();

    let running = wait_for("pod Running", Duration::from_secs(30), async || {
        let pod = pods.get("be-pod-demo").await.ok()?;
        let status = pod.status.clone()?;
        (status.phase.as_deref() == Some("Running")).then_some(pod)
    })
    .await;
    assert_eq!(
        running.spec.as_ref().unwrap().node_name.as_deref(),
        Some(node_name.as_str())
    );
    let status = running.status.unwrap();
    assert_eq!(status.qos_class.as_deref(), Some("BestEffort"));
    let container_id = status.container_statuses.unwrap()[0]
        .container_id
        .clone()
        .unwrap();
    let hash = container_id.strip_prefix("containerd://").unwrap();
    assert_eq!(hash.len(), 64);

    // A pod for a scheduler that does not run stays Pending, as on a real cluster.
    let mut absent: Pod = pod.clone();
    absent.metadata.name = Some("for-koord-scheduler".into());
    absent.spec.as_mut().unwrap().scheduler_name = Some("koord-scheduler".into());
    pods.create(&PostParams::default(), &absent).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let pending = pods.get("for-koord-scheduler").await.unwrap();
    assert_eq!(pending.spec.unwrap().node_name, None);
    assert_eq!(pending.status.unwrap().phase.as_deref(), Some("Pending"));
    pods.delete("for-koord-scheduler", &DeleteParams::default())
        .await
        .unwrap();

    let info = nodes.node(&node_name).unwrap().clone();
    let listed = wait_for("/pods lists the pod", Duration::from_secs(30), async || {
        let body = tokio::task::spawn_blocking({
            let url = info.pods_url.clone();
            move || http_get(&url)
        })
        .await
        .unwrap();
        let list: serde_json::Value = serde_json::from_str(&body).unwrap();
        let item = list["items"]
            .as_array()?
            .iter()
            .find(|p| p["metadata"]["uid"] == uid.as_str())?
            .clone();
        (item["status"]["phase"] == "Running").then_some(item)
    })
    .await;
    assert_eq!(
        listed["status"]["containerStatuses"][0]["containerID"],
        container_id.as_str()
    );

    let container_dir = info
        .cgroup_root
        .join("cpu")
        .join(format!("kubepods/besteffort/pod{uid}/{hash}"));
    assert!(
        container_dir.join("cgroup.procs").exists(),
        "{} missing",
        container_dir.display()
    );
    let pids = nodes.pod_pids(&uid);
    // stress -c 4 would be 4 workers; the annotation (0.1 core) wins: one worker.
    assert_eq!(pids.len(), 1, "{pids:?}");
    assert!(Path::new(&format!("/proc/{}", pids[0])).exists());

    pods.delete("be-pod-demo", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("pod gone from the API", Duration::from_secs(30), async || {
        pods.get_opt("be-pod-demo").await.ok()?.is_none().then_some(())
    })
    .await;
    wait_for(
        "process stopped and cgroups removed",
        Duration::from_secs(30),
        async || {
            (nodes.pod_pids(&uid).is_empty()
                && !container_dir.exists()
                && !Path::new(&format!("/proc/{}", pids[0])).exists())
            .then_some(())
        },
    )
    .await;

    drop(nodes);
    for dir in &run_dirs {
        assert!(!dir.exists(), "{} left behind", dir.display());
    }
}
