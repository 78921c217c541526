//! Reconcile request sequences against a scripted API server (tower-test): what each controller
//! sends, in which order, and that a replica without the Lease sends nothing.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use http::{Method, Request, Response, StatusCode};
use k8s_openapi::api::core::v1::{Node, NodeStatus};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::{Client, client::Body, runtime::events::Reporter};
use serde_json::{Value, json};
use tokio::sync::watch;

use super::*;
use crate::{
    batch::{Amounts, UsageReport},
    leader::Leadership,
};

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

fn context(leader: bool) -> (Arc<Context>, Handle) {
    let (ctx, handle, _) = context_with_registry(leader);
    (ctx, handle)
}

/// [`context`] and the registry its metrics are in.
fn context_with_registry(leader: bool) -> (Arc<Context>, Handle, prometheus_client::registry::Registry) {
    let mut registry = prometheus_client::registry::Registry::default();
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let leadership = if leader {
        Leadership::always()
    } else {
        Leadership::from_channel(watch::channel(false).1)
    };
    let mut state = ConfigState::new();
    let data = BTreeMap::from([(
        "colocation-config".to_owned(),
        r#"{"enable": true, "cpuReclaimThresholdPercent": 65, "memoryReclaimThresholdPercent": 65}"#
            .to_owned(),
    )]);
    state.apply(Some(&data));
    let ctx = Context {
        client: client.clone(),
        config: Arc::new(RwLock::new(state)),
        leadership,
        metrics: Arc::new(Metrics::register(&mut registry)),
        recorder: koord_runtime::EventPublisher::new(
            client,
            Reporter {
                controller: "koord-manager".into(),
                instance: None,
            },
        ),
        pods: PodIndex::default(),
        usage: UsageIndex::default(),
        topology: super::TopologyIndex::default(),
        normalization_problems: Mutex::new(HashMap::new()),
        last_batch_write: Mutex::new(HashMap::new()),
        last_mid_write: Mutex::new(HashMap::new()),
        applied_pairs: Mutex::new(HashMap::new()),
        last_zone_write: Mutex::new(HashMap::new()),
        resync: Duration::from_secs(60),
    };
    (Arc::new(ctx), handle, registry)
}

fn node() -> Node {
    let mut node = Node::default();
    node.metadata.name = Some("n1".into());
    node.metadata.uid = Some("uid-n1".into());
    let list = BTreeMap::from([
        ("cpu".to_owned(), Quantity("100".into())),
        ("memory".to_owned(), Quantity("120G".into())),
    ]);
    node.status = Some(NodeStatus {
        capacity: Some(list.clone()),
        allocatable: Some(list),
        ..NodeStatus::default()
    });
    node
}

async fn expect(handle: &mut Handle, method: Method, path: &str, status: StatusCode, reply: Value) -> Value {
    expect_request(handle, method, path, status, reply).await.body
}

/// What a request carried besides its method and path.
struct Sent {
    /// The query string (`fieldManager=...&force=true`).
    query: String,
    /// The Content-Type (which PATCH flavour).
    content_type: String,
    body: Value,
}

/// A server-side apply as `manager`, forced or not.
fn assert_apply(sent: &Sent, manager: &str, force: bool) {
    assert_eq!(sent.content_type, "application/apply-patch+yaml");
    assert!(
        sent.query.contains(&format!("fieldManager={manager}")),
        "{}",
        sent.query
    );
    assert_eq!(sent.query.contains("force=true"), force, "{}", sent.query);
}

async fn expect_request(
    handle: &mut Handle,
    method: Method,
    path: &str,
    status: StatusCode,
    reply: Value,
) -> Sent {
    let (request, send) = tokio::time::timeout(Duration::from_secs(2), handle.next_request())
        .await
        .unwrap_or_else(|_| panic!("no request for {method} {path}"))
        .expect("service dropped");
    assert_eq!(request.method(), method);
    assert_eq!(request.uri().path(), path);
    let query = request.uri().query().unwrap_or_default().to_owned();
    let content_type = request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let body = request.into_body().collect_bytes().await.unwrap();
    let body: Value = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&body).unwrap()
    };
    send.send_response(
        Response::builder()
            .status(status)
            .body(Body::from(serde_json::to_vec(&reply).unwrap()))
            .unwrap(),
    );
    Sent {
        query,
        content_type,
        body,
    }
}

fn not_found() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404, "message": "not found"})
}

#[tokio::test]
async fn nodeslo_is_created_with_an_owner_reference_to_its_node() {
    let (ctx, mut handle) = context(true);
    let task = tokio::spawn(nodeslo::reconcile(Arc::new(node()), ctx));
    let path = "/apis/slo.koordinator.sh/v1alpha1/nodeslos/n1";
    expect(&mut handle, Method::GET, path, StatusCode::NOT_FOUND, not_found()).await;
    // The apply creates it: no POST, no force.
    let mut reply = serde_json::to_value(koord_api::NodeSLO {
        metadata: kube::api::ObjectMeta {
            name: Some("n1".into()),
            ..Default::default()
        },
        spec: Default::default(),
        status: None,
    })
    .unwrap();
    reply["spec"] = json!({});
    let sent = expect_request(&mut handle, Method::PATCH, path, StatusCode::CREATED, reply).await;
    assert_apply(&sent, "koord-manager", false);
    let created = sent.body;
    assert_eq!(created["apiVersion"], "slo.koordinator.sh/v1alpha1");
    assert_eq!(created["kind"], "NodeSLO");
    assert_eq!(created["metadata"]["name"], "n1");
    assert_eq!(created["metadata"]["ownerReferences"][0]["kind"], "Node");
    assert_eq!(created["metadata"]["ownerReferences"][0]["uid"], "uid-n1");
    assert_eq!(created["spec"]["cpuBurstStrategy"]["policy"], "none");
    assert_eq!(created.get("status"), None, "the status is not the manager's");
    // The reply has no spec fields the manager did not apply: nothing left to remove.
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_replica_without_the_lease_writes_nothing() {
    let (ctx, mut handle) = context(false);
    let action = nodeslo::reconcile(Arc::new(node()), ctx.clone()).await.unwrap();
    assert_eq!(action, Action::await_change());
    noderesource::reconcile(Arc::new(node()), ctx.clone())
        .await
        .unwrap();
    // `ctx` (and so the client) stays alive: silence means no request, not a closed channel.
    let nothing = tokio::time::timeout(Duration::from_millis(100), handle.next_request()).await;
    assert!(nothing.is_err(), "no request expected");
    drop(ctx);
}

#[tokio::test]
async fn noderesource_patches_batch_resources_then_the_origin_annotation_then_an_event() {
    let (ctx, mut handle, registry) = context_with_registry(true);
    ctx.pods.apply(kube::runtime::watcher::Event::InitDone);
    let metric = koord_api::NodeMetric {
        metadata: kube::api::ObjectMeta {
            name: Some("n1".into()),
            ..Default::default()
        },
        spec: Default::default(),
        status: Some(
            serde_json::from_value(json!({
                "updateTime": jiff::Timestamp::now().to_string(),
                "nodeMetric": {"systemUsage": {"resources": {"cpu": "7", "memory": "12G"}}}
            }))
            .unwrap(),
        ),
    };
    ctx.usage.apply(kube::runtime::watcher::Event::Apply(metric));
    assert!(matches!(ctx.usage.report("n1"), Some(Ok(UsageReport { .. }))));
    let task = tokio::spawn(noderesource::reconcile(Arc::new(node()), ctx.clone()));
    // CPU normalization is off: the node is marked 1.00 once (no Event for that).
    let sent = expect_request(
        &mut handle,
        Method::PATCH,
        "/api/v1/nodes/n1",
        StatusCode::OK,
        serde_json::to_value(node()).unwrap(),
    )
    .await;
    assert_apply(&sent, "koord-manager", false);
    let ratio = sent.body;
    assert_eq!(
        ratio["metadata"]["annotations"]["node.koordinator.sh/cpu-normalization-ratio"],
        "1.00"
    );
    let sent = expect_request(
        &mut handle,
        Method::PATCH,
        "/api/v1/nodes/n1/status",
        StatusCode::OK,
        serde_json::to_value(node()).unwrap(),
    )
    .await;
    assert_apply(&sent, "koord-manager-status", false);
    let patch = sent.body;
    // 100 − 35 − 7 = 58 cores; 120 − 42 − 12 = 66 G, in canonical form as the server stores them.
    assert_eq!(patch["status"]["allocatable"]["kubernetes.io/batch-cpu"], "58k");
    assert_eq!(patch["status"]["capacity"]["kubernetes.io/batch-memory"], "66G");
    // Only the manager's own fields: the kubelet's cpu and memory are not in the apply.
    assert_eq!(patch["status"]["capacity"].get("cpu"), None);
    assert_eq!(patch["metadata"], json!({"name": "n1"}));
    let annotation = expect(
        &mut handle,
        Method::PATCH,
        "/api/v1/nodes/n1",
        StatusCode::OK,
        serde_json::to_value(node()).unwrap(),
    )
    .await;
    let origin = annotation["metadata"]["annotations"]["node.koordinator.sh/originExtendedAllocatable"]
        .as_str()
        .unwrap();
    assert!(
        origin.contains("\"kubernetes.io/batch-cpu\":\"58000\""),
        "{origin}"
    );
    // The ratio written earlier this round stays in the manager's metadata apply.
    assert_eq!(
        annotation["metadata"]["annotations"]["node.koordinator.sh/cpu-normalization-ratio"],
        "1.00"
    );
    let event = expect(
        &mut handle,
        Method::POST,
        "/apis/events.k8s.io/v1/namespaces/kube-system/events",
        StatusCode::CREATED,
        json!({}),
    )
    .await;
    assert_eq!(event["reason"], "BatchResourceUpdated");
    assert!(
        event["note"]
            .as_str()
            .unwrap()
            .starts_with("batch-cpu 58000 = capacity 100000 - margin 35000")
    );
    // Mid resources in the same status patch: no prediction and no unallocated share → 0.
    assert_eq!(patch["status"]["allocatable"]["kubernetes.io/mid-cpu"], "0");
    assert_eq!(patch["status"]["capacity"]["kubernetes.io/mid-memory"], "0");
    let event = expect(
        &mut handle,
        Method::POST,
        "/apis/events.k8s.io/v1/namespaces/kube-system/events",
        StatusCode::CREATED,
        json!({}),
    )
    .await;
    assert_eq!(event["reason"], "MidResourceUpdated");
    task.await.unwrap().unwrap();
    let labels = crate::metrics::NodeLabels { node: "n1".into() };
    assert_eq!(
        ctx.metrics.batch_cpu_allocatable.get_or_create(&labels).get(),
        58.0
    );
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    for line in [
        "koord_manager_batch_cpu_allocatable_cores{node=\"n1\"} 58.0",
        "slo_controller_node_extended_resource_allocatable_internal{node=\"n1\",resource=\"kubernetes.io/batch-cpu\",unit=\"integer\"} 58000.0",
        "slo_controller_node_resource_reconcile_count{status=\"succeeded\",reason=\"reconciled\"} 1",
    ] {
        assert!(text.contains(line), "missing {line} in\n{text}");
    }
    let _ = Amounts::ZERO;
}

/// A fresh NodeMetric report for n1 (system usage 7 cores, 12 G) and the pod index synced.
fn report_usage(ctx: &Context) {
    ctx.pods.apply(kube::runtime::watcher::Event::InitDone);
    let status = json!({"updateTime": jiff::Timestamp::now().to_string(),
        "nodeMetric": {"systemUsage": {"resources": {"cpu": "7", "memory": "12G"}}}});
    let metric = koord_api::NodeMetric {
        metadata: kube::api::ObjectMeta {
            name: Some("n1".into()),
            ..Default::default()
        },
        spec: Default::default(),
        status: Some(serde_json::from_value(status).unwrap()),
    };
    ctx.usage.apply(kube::runtime::watcher::Event::Apply(metric));
}

/// n1 as the server holds it: `extra` in capacity and allocatable, ratio 1.00 already marked.
fn node_with(extra: &[(&str, &str)]) -> Node {
    let mut node = node();
    node.metadata.annotations = Some(BTreeMap::from([(
        "node.koordinator.sh/cpu-normalization-ratio".to_owned(),
        "1.00".to_owned(),
    )]));
    if let Some(status) = node.status.as_mut() {
        for list in [status.capacity.as_mut(), status.allocatable.as_mut()]
            .into_iter()
            .flatten()
        {
            for (k, v) in extra {
                list.insert((*k).to_owned(), Quantity((*v).to_owned()));
            }
        }
    }
    node
}

#[tokio::test]
async fn a_conflicting_status_apply_is_forced_once_and_counted() {
    let (ctx, mut handle, registry) = context_with_registry(true);
    report_usage(&ctx);
    // Someone else wrote batch-cpu 10 (the node says so): the manager takes it back.
    let observed = node_with(&[
        ("kubernetes.io/batch-cpu", "10"),
        ("kubernetes.io/batch-memory", "1"),
    ]);
    let task = tokio::spawn(noderesource::reconcile(Arc::new(observed), ctx.clone()));
    let conflict = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict", "code": 409,
        "message": "Apply failed with 1 conflict: conflict with \"other\" using v1: .status.capacity.kubernetes.io/batch-cpu",
        "details": {"causes": [{"reason": "FieldManagerConflict", "message": "conflict with \"other\" using v1",
            "field": ".status.capacity.kubernetes.io/batch-cpu"}]}});
    let path = "/api/v1/nodes/n1/status";
    let first = expect_request(&mut handle, Method::PATCH, path, StatusCode::CONFLICT, conflict).await;
    assert_apply(&first, "koord-manager-status", false);
    let reply = serde_json::to_value(node_with(&[("kubernetes.io/batch-cpu", "58k")])).unwrap();
    let forced = expect_request(&mut handle, Method::PATCH, path, StatusCode::OK, reply).await;
    assert_apply(&forced, "koord-manager-status", true);
    assert_eq!(forced.body, first.body, "the same configuration, forced");
    let reply = serde_json::to_value(node()).unwrap();
    let origin = expect_request(
        &mut handle,
        Method::PATCH,
        "/api/v1/nodes/n1",
        StatusCode::OK,
        reply,
    )
    .await;
    assert_apply(&origin, "koord-manager", false);
    for _ in 0..2 {
        let events = "/apis/events.k8s.io/v1/namespaces/kube-system/events";
        expect(&mut handle, Method::POST, events, StatusCode::CREATED, json!({})).await;
    }
    task.await.unwrap().unwrap();
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    let line = "koord_manager_apply_conflicts_total{resource=\"nodes/status\"} 1";
    assert!(text.contains(line), "missing {line} in\n{text}");
}

#[tokio::test]
async fn batch_resources_an_older_merge_patch_wrote_are_removed_when_the_apply_leaves_them() {
    let (ctx, mut handle) = context(true);
    {
        let mut state = ctx.config.write().unwrap();
        let data = BTreeMap::from([("colocation-config".to_owned(), r#"{"enable": false}"#.to_owned())]);
        state.apply(Some(&data));
    }
    report_usage(&ctx);
    // batch-* written by a merge patch (an Update entry owns them): omitting them keeps them.
    let written = [
        ("kubernetes.io/batch-cpu", "58k"),
        ("kubernetes.io/batch-memory", "66G"),
    ];
    let task = tokio::spawn(noderesource::reconcile(
        Arc::new(node_with(&written)),
        ctx.clone(),
    ));
    let path = "/api/v1/nodes/n1/status";
    let still_there = serde_json::to_value(node_with(&written)).unwrap();
    let apply = expect_request(&mut handle, Method::PATCH, path, StatusCode::OK, still_there).await;
    assert_apply(&apply, "koord-manager-status", false);
    assert_eq!(apply.body.get("status"), None, "{}", apply.body);
    let removal = expect_request(
        &mut handle,
        Method::PATCH,
        path,
        StatusCode::OK,
        serde_json::to_value(node()).unwrap(),
    )
    .await;
    assert_eq!(removal.content_type, "application/merge-patch+json");
    assert!(removal.query.contains("fieldManager=koord-manager-status"));
    let nulls = json!({"kubernetes.io/batch-cpu": null, "kubernetes.io/batch-memory": null});
    let want = json!({"status": {"capacity": nulls.clone(), "allocatable": nulls}});
    assert_eq!(removal.body, want);
    let reply = serde_json::to_value(node()).unwrap();
    expect(
        &mut handle,
        Method::PATCH,
        "/api/v1/nodes/n1",
        StatusCode::OK,
        reply,
    )
    .await;
    let events = "/apis/events.k8s.io/v1/namespaces/kube-system/events";
    let event = expect(&mut handle, Method::POST, events, StatusCode::CREATED, json!({})).await;
    assert_eq!(event["reason"], "BatchResourceRemoved");
    task.await.unwrap().unwrap();
}

fn topology(resource_version: &str, zone0_cpu: &str) -> Value {
    json!({
        "apiVersion": "topology.node.k8s.io/v1alpha1", "kind": "NodeResourceTopology",
        "metadata": {"name": "n1", "resourceVersion": resource_version},
        "topologyPolicies": ["None"],
        "zones": [{"name": "node-0", "type": "Node", "resources": [
            {"name": "cpu", "capacity": zone0_cpu, "allocatable": zone0_cpu, "available": zone0_cpu}]}],
        "attributes": [{"name": "kept", "value": "as read"}],
    })
}

#[tokio::test]
async fn zone_entries_are_written_with_the_resource_version_read_and_retried_on_conflict() {
    let (ctx, mut handle) = context(true);
    let targets = BTreeMap::from([("node-0".to_owned(), Amounts::new(12_000, 1_000))]);
    let client = ctx.client.clone();
    let task = tokio::spawn(async move { nrt_zones::write(&client, "n1", &targets).await });
    let path = "/apis/topology.node.k8s.io/v1alpha1/noderesourcetopologies/n1";
    expect(&mut handle, Method::GET, path, StatusCode::OK, topology("7", "8")).await;
    let conflict = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict", "code": 409, "message": "the object has been modified"});
    let first = expect_request(&mut handle, Method::PUT, path, StatusCode::CONFLICT, conflict).await;
    assert_eq!(first.body["metadata"]["resourceVersion"], "7");
    assert!(
        first.query.contains("fieldManager=koord-manager"),
        "{}",
        first.query
    );
    // Read again: another writer changed node-0's cpu meanwhile; its value is kept.
    expect(&mut handle, Method::GET, path, StatusCode::OK, topology("8", "6")).await;
    let second = expect_request(&mut handle, Method::PUT, path, StatusCode::OK, topology("9", "6")).await;
    assert_eq!(second.body["metadata"]["resourceVersion"], "8");
    assert_eq!(
        second.body["attributes"],
        json!([{"name": "kept", "value": "as read"}])
    );
    assert_eq!(
        second.body["zones"][0]["resources"],
        json!([
            {"name": "cpu", "capacity": "6", "allocatable": "6", "available": "6"},
            {"name": "kubernetes.io/batch-cpu", "capacity": "12000", "allocatable": "12000", "available": "12000"},
            {"name": "kubernetes.io/batch-memory", "capacity": "1000", "allocatable": "1000", "available": "1000"},
        ])
    );
    assert_eq!(task.await.unwrap().unwrap(), nrt_zones::ZoneWrite::Written);
}

#[tokio::test]
async fn zone_entries_already_in_place_are_not_written() {
    let (ctx, mut handle) = context(true);
    let targets = BTreeMap::from([("node-0".to_owned(), Amounts::new(12_000, 1_000))]);
    let client = ctx.client.clone();
    let task = tokio::spawn(async move { nrt_zones::write(&client, "n1", &targets).await });
    let path = "/apis/topology.node.k8s.io/v1alpha1/noderesourcetopologies/n1";
    let mut current = topology("7", "8");
    current["zones"][0]["resources"] = json!([
        {"name": "kubernetes.io/batch-cpu", "capacity": "12k", "allocatable": "12k", "available": 12000},
        {"name": "kubernetes.io/batch-memory", "capacity": "1k", "allocatable": "1k", "available": "1k"},
    ]);
    expect(&mut handle, Method::GET, path, StatusCode::OK, current).await;
    assert_eq!(task.await.unwrap().unwrap(), nrt_zones::ZoneWrite::AlreadyInPlace);
    let nothing = tokio::time::timeout(Duration::from_millis(100), handle.next_request()).await;
    assert!(nothing.is_err(), "no request expected");
    drop(ctx);
}

#[tokio::test]
async fn deleted_nodes_are_forgotten_with_their_series() {
    let (ctx, _handle) = context(true);
    let now = jiff::Timestamp::now();
    for node in ["kept", "gone", "missed"] {
        ctx.last_batch_write.lock().unwrap().insert(node.into(), now);
        ctx.last_zone_write.lock().unwrap().insert(node.into(), now);
        ctx.normalization_problems
            .lock()
            .unwrap()
            .insert(node.into(), "no model".into());
        ctx.metrics.batch_published(node, Some((1000, 1)));
    }
    ctx.forget_node("gone");
    // After a relist that no longer has `missed`.
    let listed = std::collections::HashSet::from(["kept".to_owned()]);
    assert_eq!(ctx.forget_nodes_except(&listed), ["missed"]);
    for map in [&ctx.last_batch_write, &ctx.last_zone_write] {
        assert_eq!(map.lock().unwrap().keys().collect::<Vec<_>>(), ["kept"]);
    }
    assert_eq!(
        ctx.normalization_problems
            .lock()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["kept"]
    );
    let labels = |node: &str| crate::metrics::NodeLabels { node: node.into() };
    assert_eq!(
        ctx.metrics
            .batch_cpu_allocatable
            .get_or_create(&labels("kept"))
            .get(),
        1.0
    );
    // Gone: a fresh gauge (0), not the old value.
    assert_eq!(
        ctx.metrics
            .batch_cpu_allocatable
            .get_or_create(&labels("gone"))
            .get(),
        0.0
    );
    assert_eq!(
        ctx.metrics
            .batch_cpu_allocatable
            .get_or_create(&labels("missed"))
            .get(),
        0.0
    );
}
