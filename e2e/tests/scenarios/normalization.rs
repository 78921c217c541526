//! CPU normalization end to end: koordlet reports the node's CPU model in its
//! NodeResourceTopology, the manager turns `cpu-normalization-config` into the node's ratio and
//! scales batch-cpu by it, and koordlet divides the BE pod's CFS quota by the same ratio. Mid
//! resources: with `midUnallocatedPercent` the manager publishes `kubernetes.io/mid-cpu` and
//! `mid-memory`, and a `koord-mid` pod mutated by the webhook runs on them; without it, mid
//! resources come from koordlet's peak prediction alone (the scenario clusters run koordlet
//! without the prediction's 24 h cold start).

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use koord_api::cpu_normalization::CpuBasicInfo;
use koord_api::names::{ANNOTATION_CPU_BASIC_INFO, ANNOTATION_CPU_NORMALIZATION_RATIO};
use koord_api::nodemetric::NodeMetric;
use koord_api::topology::NodeResourceTopology;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use crate::colocation::{colocation, container_hash, pod_cgroup, profiled_namespace, read};
use crate::common::{self, wait_for};
use crate::env::{Backend, Env, Load, Wanted};

const RATIO: &str = "1.25";

/// What koordlet reported for `node`, once it has.
async fn basic_info(env: &Env, node: &str) -> CpuBasicInfo {
    let api: Api<NodeResourceTopology> = Api::all(env.client.clone());
    let text = wait_for(
        "koordlet's cpu-basic-info in the NodeResourceTopology",
        Duration::from_secs(180),
        async || {
            api.get_opt(node)
                .await
                .ok()
                .flatten()?
                .annotation(ANNOTATION_CPU_BASIC_INFO)
                .map(str::to_owned)
        },
    )
    .await;
    CpuBasicInfo::parse(&text).unwrap()
}

/// The cluster's `colocation-config` now (`{}` when unset).
async fn colocation_config(env: &Env) -> serde_json::Value {
    let text = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(
        env.client.clone(),
        koord_api::names::DEFAULT_CONFIG_NAMESPACE,
    )
    .get(koord_api::names::DEFAULT_SLO_CONFIG_NAME)
    .await
    .unwrap()
    .data
    .and_then(|d| d.get("colocation-config").cloned())
    .unwrap_or_else(|| "{}".into());
    serde_json::from_str(&text).unwrap()
}

async fn node_ratio(env: &Env, node: &str) -> Option<String> {
    Api::<Node>::all(env.client.clone())
        .get(node)
        .await
        .ok()?
        .metadata
        .annotations?
        .get(ANNOTATION_CPU_NORMALIZATION_RATIO)
        .cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpu_normalization_scales_batch_cpu_and_shrinks_be_quotas() {
    let env = Env::start(Wanted::default()).await;
    let mut cleanup = colocation(&env).await;
    let ns = cleanup.ns().to_string();
    let node = env.node_names().await.into_iter().next().unwrap();
    let info = basic_info(&env, &node).await;
    println!("koordlet reported {info:?}");
    // The same ratio in every hyper-threading/turbo mode: the test does not depend on the machine.
    let ratios = json!({"baseRatio": 1.25, "hyperThreadEnabledRatio": 1.25,
                        "turboEnabledRatio": 1.25, "hyperThreadTurboEnabledRatio": 1.25});
    let config = json!({"enable": true, "ratioModel": {info.cpu_model.clone(): ratios}});
    cleanup
        .set_config("cpu-normalization-config", &config.to_string())
        .await
        .unwrap();
    wait_for(
        "the node's ratio from the manager",
        Duration::from_secs(120),
        async || (node_ratio(&env, &node).await.as_deref() == Some(RATIO)).then_some(()),
    )
    .await;
    // The ratio change makes the manager rewrite batch-cpu at once and say so.
    wait_for(
        "a BatchResourceUpdated Event with the ratio",
        Duration::from_secs(120),
        async || {
            let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(env.client.clone());
            let list = events.list(&Default::default()).await.ok()?;
            list.items
                .into_iter()
                .find(|e| {
                    e.reason.as_deref() == Some("BatchResourceUpdated")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(node.as_str())
                        && e.note
                            .as_deref()
                            .is_some_and(|n| n.contains("cpu-normalization-ratio 1.25"))
                })
                .map(|e| println!("{}", e.note.unwrap_or_default()))
        },
    )
    .await;

    // A BE pod limited to 500 batch milli-cores: 50000 µs per 100 ms on baseline cores, so
    // ceil(50000 / 1.25) = 40000 on this node.
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), &ns);
    let resources =
        json!({"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "500m", "memory": "128Mi"}});
    let pod = env.pod(
        "normalized",
        json!({"app": "normalized"}),
        vec![env.container("main", Load::Idle, resources)],
    );
    common::wait_for_batch_cpu(&env.client, 100).await;
    common::create_until_mutated_to_be(&pods, &pod).await;
    let running = env.wait_running(&ns, "normalized").await;
    let pod_node = running.spec.as_ref().unwrap().node_name.clone().unwrap();
    let uid = running.metadata.uid.clone().unwrap();
    let root = match env.cgroup_root(&pod_node) {
        Ok(root) => root,
        Err(reason) => {
            println!("skipped: {reason} (the ratio was published)");
            return;
        }
    };
    let hash = container_hash(&running);
    let found = wait_for(
        "BE quota divided by the ratio",
        Duration::from_secs(60),
        async || {
            let dir = pod_cgroup(&root, "cpu", &uid)?;
            let pod_quota = read(&dir.join("cpu.cfs_quota_us"))?;
            let container_quota = read(&dir.join(&hash).join("cpu.cfs_quota_us"))?;
            (pod_quota == "40000" && container_quota == "40000").then_some(dir)
        },
    )
    .await;
    println!(
        "{}: cpu.cfs_quota_us 40000 at pod and container level",
        found.display()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn koord_mid_pod_runs_on_mid_resources_from_the_unallocated_share() {
    let env = Env::start(Wanted::default()).await;
    let mut cleanup = profiled_namespace(&env, "mid", "LS", "koord-mid").await;
    let ns = cleanup.ns().to_string();
    let mut value = colocation_config(&env).await;
    value["enable"] = json!(true);
    value["midUnallocatedPercent"] = json!(50);
    cleanup
        .set_config("colocation-config", &value.to_string())
        .await
        .unwrap();

    // Half of what prod pods leave unrequested: at least 100 mid milli-cores on some node.
    let offered = wait_for("mid-cpu on a node", Duration::from_secs(180), async || {
        let nodes = Api::<Node>::all(env.client.clone())
            .list(&Default::default())
            .await
            .ok()?;
        nodes.items.into_iter().find_map(|n| {
            let q = n.status?.allocatable?.get("kubernetes.io/mid-cpu")?.clone();
            let milli = koord_api::ExactQuantity::from_k8s(&q).ok()?.value();
            (milli >= 100).then(|| (n.metadata.name.unwrap_or_default(), milli))
        })
    })
    .await;
    println!("{} offers mid-cpu {}", offered.0, offered.1);

    let pods: Api<Pod> = Api::namespaced(env.client.clone(), &ns);
    let resources =
        json!({"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"cpu": "100m", "memory": "32Mi"}});
    let pod = env.pod(
        "mid",
        json!({"app": "mid"}),
        vec![env.container("main", Load::Idle, resources)],
    );
    let created = create_mutated_to_mid(&pods, &pod).await;
    let spec = created.spec.clone().unwrap();
    let requests = spec.containers[0].resources.clone().unwrap().requests.unwrap();
    assert!(!requests.contains_key("cpu"), "{requests:?}");
    assert_eq!(
        koord_api::ExactQuantity::from_k8s(&requests["kubernetes.io/mid-cpu"])
            .map(koord_api::ExactQuantity::value),
        Ok(100)
    );
    let running = env.wait_running(&ns, "mid").await;
    println!(
        "koord-mid pod running on {} with {:?}",
        running.spec.unwrap().node_name.unwrap_or_default(),
        requests
    );
}

/// Creates `pod` until the webhook has mutated it to mid resources (a pod created before the
/// webhook saw its namespace's profile is deleted and created again).
async fn create_mutated_to_mid(pods: &Api<Pod>, pod: &Pod) -> Pod {
    let name = pod.metadata.name.clone().unwrap_or_default();
    wait_for(
        "the webhook's koord-mid mutation",
        Duration::from_secs(60),
        async || {
            let created = pods.create(&PostParams::default(), pod).await.ok()?;
            let res = created.spec.as_ref()?.containers[0].resources.clone()?;
            if res.requests.as_ref()?.contains_key("kubernetes.io/mid-cpu") {
                return Some(created);
            }
            let _ = pods.delete(&name, &Default::default()).await;
            tokio::time::sleep(Duration::from_secs(2)).await;
            None
        },
    )
    .await
}

/// A CPU quantity in milli-cores (`"3"` is 3000).
fn milli_cpu(q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity) -> Option<i64> {
    koord_api::ExactQuantity::from_k8s(q).ok()?.milli_value().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mid_resources_follow_koordlets_prod_reclaimable_prediction() {
    let env = Env::start(Wanted::default()).await;
    if matches!(env.backend, Backend::Real) {
        // The priority predictor leaves `Σ prod requests − (system + prod peaks) × 1.1`: on a
        // real node of two CPUs that also runs its control plane, no prod request that fits
        // stays above the system's peak, and koordlet's cold start is 24 h there.
        println!(
            "skipped: needs a node whose free CPU exceeds its system usage peak and koordlet without the prediction's cold start (embedded cluster)"
        );
        return;
    }
    let mut cleanup = profiled_namespace(&env, "prod", "LS", "koord-prod").await;
    let ns = cleanup.ns().to_string();
    // Colocation on, nothing from the unallocated share: mid can only come from prediction.
    let mut value = colocation_config(&env).await;
    value["enable"] = json!(true);
    value["midUnallocatedPercent"] = json!(0);
    cleanup
        .set_config("colocation-config", &value.to_string())
        .await
        .unwrap();

    // An idle prod pod that requests more CPU than the host has plus one (the simulated node
    // has four times the host's): the system's peak is the whole host's usage at most, so at
    // least a CPU stays reclaimable however busy the host is.
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), &ns);
    let cpus = (std::thread::available_parallelism().map_or(2, std::num::NonZero::get) * 2 + 1).to_string();
    let resources =
        json!({"requests": {"cpu": cpus, "memory": "64Mi"}, "limits": {"cpu": cpus, "memory": "64Mi"}});
    let pod = env.pod(
        "reserve",
        json!({"app": "reserve"}),
        vec![env.container("main", Load::Idle, resources)],
    );
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let running = env.wait_running(&ns, "reserve").await;
    let node = running.spec.unwrap().node_name.unwrap();

    let metrics: Api<NodeMetric> = Api::all(env.client.clone());
    let nodes: Api<Node> = Api::all(env.client.clone());
    // The largest prediction seen: the manager computes mid from one koordlet reported, and
    // with no unallocated share mid = min(min(prodReclaimable, unused), cap) cannot exceed it.
    let mut max_reclaimable = 0;
    let mut last = (None, None);
    let found = koord_test_support::Poll::new(
        "mid-cpu from koordlet's prodReclaimableMetric",
        Duration::from_secs(300),
    )
    .until(async || {
        let status = metrics.get(&node).await.ok()?.status?;
        let cpu = status
            .prod_reclaimable_metric
            .and_then(|m| m.resource.resources.get("cpu").and_then(milli_cpu));
        last.0 = cpu;
        let cpu = cpu?;
        max_reclaimable = max_reclaimable.max(cpu);
        let allocatable = nodes.get(&node).await.ok()?.status?.allocatable?;
        let mid = allocatable
            .get("kubernetes.io/mid-cpu")
            .and_then(common::quantity_value);
        last.1 = mid;
        let mid = mid?;
        // At least 100m predicted and offered, and a value the formula can give.
        (cpu >= 100 && mid >= 100 && mid <= max_reclaimable).then_some((cpu, mid))
    })
    .await;
    let (reclaimable, mid) = found.unwrap_or_else(|timed_out| {
        panic!(
            "{timed_out}: last prodReclaimableMetric cpu {:?}, mid-cpu {:?}, largest prediction {max_reclaimable}",
            last.0, last.1
        )
    });
    println!(
        "{node}: prodReclaimableMetric cpu {reclaimable}m (largest seen {max_reclaimable}m), mid-cpu {mid}"
    );

    // A koord-mid pod (profile below) runs on the predicted mid resources.
    let mid_ns = profiled_namespace(&env, "midpred", "LS", "koord-mid").await;
    let mid_pods: Api<Pod> = Api::namespaced(env.client.clone(), mid_ns.ns());
    // CPU only: the prediction leaves no memory (the host's memory in use is above the 64Mi
    // prod request), so a mid-memory request would not fit.
    let small = json!({"requests": {"cpu": "50m"}, "limits": {"cpu": "50m"}});
    let mid_pod = env.pod(
        "mid",
        json!({"app": "mid"}),
        vec![env.container("main", Load::Idle, small)],
    );
    let created = create_mutated_to_mid(&mid_pods, &mid_pod).await;
    assert!(created.spec.is_some());
    let running = env.wait_running(mid_ns.ns(), "mid").await;
    println!(
        "koord-mid pod running on {}",
        running.spec.unwrap().node_name.unwrap_or_default()
    );
    drop(mid_ns);
}
