//! Eviction through the cluster's Eviction API (`policy/v1beta1` on Kubernetes before 1.22):
//! a memory threshold that node usage is always over makes koordlet evict BE pods, with the
//! `evictPodSuccess` Event; a PodDisruptionBudget turns it into a 429 and `evictPodFail`; with
//! `MemoryEvict`, an LS pod that opted in (`koordinator.sh/eviction-enabled`) and whose priority
//! class is at or below `evictEnabledPriorityThreshold` goes too, and a prod one stays.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use koord_api::names::KEY_RESOURCE_THRESHOLD_CONFIG;
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;

use crate::common::{self, wait_for};
use crate::env::{Cleanup, Env, Load, POD_START, Wanted};

/// Node memory usage is always above 1 %: every BE pod on the node is a candidate.
pub(crate) const EVICT_EVERYTHING: &str = "{\"clusterStrategy\": {\"enable\": true, \"memoryEvictThresholdPercent\": 1, \"memoryEvictLowerPercent\": 0}}";

/// Whether koordlet runs with feature gate `gate` (the eviction gates are off by default, as
/// upstream).
async fn gate_enabled(env: &Env, gate: &str) -> Result<(), String> {
    if !env.is_real() {
        return Ok(());
    }
    let daemonsets: Api<k8s_openapi::api::apps::v1::DaemonSet> =
        Api::namespaced(env.client.clone(), koord_api::names::DEFAULT_CONFIG_NAMESPACE);
    let ds = daemonsets
        .get("koordlet")
        .await
        .map_err(|e| format!("koordlet DaemonSet: {e}"))?;
    let enabled = ds
        .spec
        .iter()
        .flat_map(|spec| spec.template.spec.iter())
        .flat_map(|pod| pod.containers.iter())
        .flat_map(|c| c.args.iter().flatten())
        .filter_map(|arg| arg.strip_prefix("--feature-gates="))
        .flat_map(|gates| gates.split(','))
        .any(|entry| entry.trim() == format!("{gate}=true"));
    if enabled {
        Ok(())
    } else {
        Err(format!(
            "koordlet runs without --feature-gates {gate}=true (chart value koordlet.featureGates.{gate})"
        ))
    }
}

/// A BE pod (100 batch-cpu, 32Mi batch-memory) bound to `node`, running `load`.
pub(crate) async fn be_pod(env: &Env, cleanup: &Cleanup, name: &str, node: &str, load: Load) -> Pod {
    let ns = cleanup.ns();
    let mut pod = env.pod(
        name,
        json!({"koordinator.sh/qosClass": "BE", "app": name}),
        vec![env.container(
            "main",
            load,
            json!({
            "requests": {"kubernetes.io/batch-cpu": "100", "kubernetes.io/batch-memory": "32Mi"},
            "limits": {"kubernetes.io/batch-cpu": "100", "kubernetes.io/batch-memory": "32Mi"}}),
        )],
    );
    let spec = pod.spec.as_mut().unwrap();
    spec.node_name = Some(node.to_string());
    spec.priority_class_name = Some("koord-batch".into());
    // Bound to the node directly: the kubelet refuses it (OutOfbatch-cpu) unless the node
    // offers the batch-cpu now, which on a small real node follows its recent usage.
    common::wait_for_batch_cpu(&env.client, 100).await;
    Api::<Pod>::namespaced(env.client.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
    env.wait_running(ns, name).await
}

/// A PodDisruptionBudget `guard` with `minAvailable: 1` over the pods labelled `app: <app>`
/// (policy/v1, or policy/v1beta1 on a cluster before 1.21).
pub(crate) async fn pod_disruption_budget(env: &Env, ns: &str, app: &str) {
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "guard"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": app}}}
    }))
    .unwrap();
    // policy/v1 PDBs exist from Kubernetes 1.21; 1.20 has only v1beta1.
    let v1: Api<PodDisruptionBudget> = Api::namespaced(env.client.clone(), ns);
    if let Err(e) = v1.create(&PostParams::default(), &pdb).await {
        let v1beta1 = kube::api::ApiResource {
            group: "policy".into(),
            version: "v1beta1".into(),
            api_version: "policy/v1beta1".into(),
            kind: "PodDisruptionBudget".into(),
            plural: "poddisruptionbudgets".into(),
        };
        let api: Api<kube::api::DynamicObject> = Api::namespaced_with(env.client.clone(), ns, &v1beta1);
        let mut obj: kube::api::DynamicObject =
            serde_json::from_value(serde_json::to_value(&pdb).unwrap()).unwrap();
        obj.types = Some(kube::api::TypeMeta {
            api_version: "policy/v1beta1".into(),
            kind: "PodDisruptionBudget".into(),
        });
        api.create(&PostParams::default(), &obj)
            .await
            .unwrap_or_else(|e2| panic!("PDB: policy/v1 {e}; policy/v1beta1 {e2}"));
    }
}

async fn reasons(env: &Env, ns: &str, pod: &str) -> Vec<(String, String)> {
    Api::<Event>::namespaced(env.client.clone(), ns)
        .list(&ListParams::default().fields(&format!("involvedObject.name={pod}")))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect()
}

/// Waits until `pod` is gone (or going) and its `evictPodSuccess` Event is there; returns the
/// Event's message.
async fn evicted(env: &Env, ns: &str, pod: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), ns);
    wait_for(&format!("{pod} evicted"), POD_START, async || {
        let p = pods.get_opt(pod).await.ok()?;
        p.is_none_or(|p| p.metadata.deletion_timestamp.is_some())
            .then_some(())
    })
    .await;
    wait_for("evictPodSuccess Event", Duration::from_secs(30), async || {
        reasons(env, ns, pod)
            .await
            .into_iter()
            .find_map(|(r, message)| (r == "evictPodSuccess").then_some(message))
    })
    .await
}

async fn prepare(env: &Env, prefix: &str) -> Option<(Cleanup, String)> {
    prepare_with(env, prefix, "BEMemoryEvict").await
}

async fn prepare_with(env: &Env, prefix: &str, gate: &str) -> Option<(Cleanup, String)> {
    if let Err(reason) = gate_enabled(env, gate).await {
        println!("skipped: {reason}");
        return None;
    }
    let node = env.node_names().await.into_iter().next().expect("a Ready node");
    let cleanup = env.namespace(prefix, json!({})).await;
    Some((cleanup, node))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn be_pod_is_evicted_through_the_eviction_api_with_an_event() {
    let env = Env::start(Wanted::default()).await;
    let Some((mut cleanup, node)) = prepare(&env, "evict").await else {
        return;
    };
    let ns = cleanup.ns().to_string();
    be_pod(&env, &cleanup, "be-victim", &node, Load::Idle).await;
    cleanup
        .set_config(KEY_RESOURCE_THRESHOLD_CONFIG, EVICT_EVERYTHING)
        .await
        .unwrap();
    let message = evicted(&env, &ns, "be-victim").await;
    assert!(message.contains("EvictPodByNodeMemoryUsage"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_disruption_budget_keeps_the_be_pod() {
    let env = Env::start(Wanted::default()).await;
    let Some((mut cleanup, node)) = prepare(&env, "pdb").await else {
        return;
    };
    let ns = cleanup.ns().to_string();
    be_pod(&env, &cleanup, "be-guarded", &node, Load::Idle).await;
    pod_disruption_budget(&env, &ns, "be-guarded").await;
    // The disruption controller (real cluster) must count the pod healthy first.
    tokio::time::sleep(Duration::from_secs(3)).await;
    cleanup
        .set_config(KEY_RESOURCE_THRESHOLD_CONFIG, EVICT_EVERYTHING)
        .await
        .unwrap();
    let events = wait_for("evictPodFail Event", POD_START, async || {
        let events = reasons(&env, &ns, "be-guarded").await;
        events.iter().any(|(r, _)| r == "evictPodFail").then_some(events)
    })
    .await;
    let (_, message) = events.iter().find(|(r, _)| r == "evictPodFail").unwrap();
    assert!(message.contains("EvictPodByNodeMemoryUsage"), "{message}");
    assert!(events.iter().all(|(r, _)| r != "evictPodSuccess"), "{events:?}");
    let pod = Api::<Pod>::namespaced(env.client.clone(), &ns)
        .get("be-guarded")
        .await
        .unwrap();
    assert!(
        pod.metadata.deletion_timestamp.is_none(),
        "the guarded pod is being deleted"
    );
}

/// An LS pod (100m CPU, 32Mi) of `priority_class` (none: priority 0) bound to `node`, labelled
/// `koordinator.sh/eviction-enabled=true`.
async fn opted_in_ls_pod(env: &Env, cleanup: &Cleanup, name: &str, node: &str, priority_class: Option<&str>) {
    let ns = cleanup.ns();
    let mut pod = env.pod(
        name,
        json!({"koordinator.sh/qosClass": "LS", "koordinator.sh/eviction-enabled": "true", "app": name}),
        vec![env.container(
            "main",
            Load::Idle,
            json!({"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"cpu": "100m", "memory": "32Mi"}}),
        )],
    );
    let spec = pod.spec.as_mut().unwrap();
    spec.node_name = Some(node.to_string());
    spec.priority_class_name = priority_class.map(str::to_owned);
    Api::<Pod>::namespaced(env.client.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
    env.wait_running(ns, name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_evict_takes_the_opted_in_ls_pod_at_or_below_the_priority_threshold() {
    let env = Env::start(Wanted::default()).await;
    let Some((mut cleanup, node)) = prepare_with(&env, "optin", "MemoryEvict").await else {
        return;
    };
    let ns = cleanup.ns().to_string();
    // No priority class is priority 0, koord-prod 9000: only the first is at or below the
    // threshold. (koord-batch and koord-mid pods are BE or mid pods: the webhook turns their
    // requests into batch or mid resources.)
    opted_in_ls_pod(&env, &cleanup, "ls-low", &node, None).await;
    opted_in_ls_pod(&env, &cleanup, "ls-prod", &node, Some("koord-prod")).await;
    cleanup
        .set_config(
            KEY_RESOURCE_THRESHOLD_CONFIG,
            "{\"clusterStrategy\": {\"enable\": true, \"memoryEvictThresholdPercent\": 1, \
             \"memoryEvictLowerPercent\": 0, \"evictEnabledPriorityThreshold\": 6000}}",
        )
        .await
        .unwrap();
    let message = evicted(&env, &ns, "ls-low").await;
    assert!(
        message.contains("EvictPodByMemoryUsedThresholdPercent")
            && message.contains("eviction priority 0, priority 0"),
        "{message}"
    );
    // Two rounds past the 4 s cool-down: the prod pod is never picked.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let prod = Api::<Pod>::namespaced(env.client.clone(), &ns)
        .get("ls-prod")
        .await
        .unwrap();
    assert!(
        prod.metadata.deletion_timestamp.is_none(),
        "ls-prod is being deleted"
    );
    // (A real kubelet's Pulled/Created/Started Events are on it too.)
    let events = reasons(&env, &ns, "ls-prod").await;
    assert!(
        events.iter().all(|(r, _)| !r.starts_with("evictPod")),
        "{events:?}"
    );
}
