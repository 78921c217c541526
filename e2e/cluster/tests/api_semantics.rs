//! CRUD, list, watch and consistency semantics through unmodified kube-rs clients.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{cluster_with_namespace, pod, unique};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use koord_test_support::eventually;
use kube::Resource;
use kube::api::{Api, DeleteParams, ListParams, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::{Controller, WatchStreamExt, controller::Action, reflector, watcher};
use serde_json::json;

#[tokio::test]
async fn create_get_list_sets_server_metadata() {
    let (_c, client, ns) = cluster_with_namespace().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let created = pods
        .create(&PostParams::default(), &pod("a", &[("app", "web")]))
        .await
        .unwrap();
    assert!(created.metadata.uid.is_some());
    assert!(created.metadata.creation_timestamp.is_some());
    assert_eq!(created.metadata.generation, Some(1));
    assert_eq!(created.status.as_ref().unwrap().phase.as_deref(), Some("Pending"));
    assert_eq!(
        created.status.as_ref().unwrap().qos_class.as_deref(),
        Some("BestEffort")
    );
    let err = pods
        .create(&PostParams::default(), &pod("a", &[]))
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 409 && s.reason == "AlreadyExists"),
        "{err:?}"
    );
    let missing = pods.get("nope").await.unwrap_err();
    assert!(matches!(missing, kube::Error::Api(ref s) if s.code == 404 && s.reason == "NotFound"));
    // Namespaces carry the name label a real API server adds (webhook namespace selectors).
    let namespace = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .get(&ns)
        .await
        .unwrap();
    assert_eq!(
        namespace
            .metadata
            .labels
            .unwrap_or_default()
            .get("kubernetes.io/metadata.name"),
        Some(&ns)
    );
    // Namespaced object in a namespace that does not exist.
    let ghost: Api<Pod> = Api::namespaced(client.clone(), &unique("ghost"));
    let err = ghost
        .create(&PostParams::default(), &pod("a", &[]))
        .await
        .unwrap_err();
    assert!(matches!(err, kube::Error::Api(ref s) if s.code == 404));
}

#[tokio::test]
async fn list_selectors_limit_continue() {
    let (_c, client, ns) = cluster_with_namespace().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    for i in 0..7 {
        let tier = if i % 2 == 0 { "even" } else { "odd" };
        pods.create(&PostParams::default(), &pod(&format!("p{i}"), &[("tier", tier)]))
            .await
            .unwrap();
    }
    let even = pods
        .list(&ListParams::default().labels("tier=even"))
        .await
        .unwrap();
    assert_eq!(even.items.len(), 4);
    let notin = pods
        .list(&ListParams::default().labels("tier notin (even)"))
        .await
        .unwrap();
    assert_eq!(notin.items.len(), 3);
    let by_name = pods
        .list(&ListParams::default().fields("metadata.name=p3"))
        .await
        .unwrap();
    assert_eq!(by_name.items.len(), 1);
    let unscheduled = pods
        .list(&ListParams::default().fields("spec.nodeName=,status.phase=Pending"))
        .await
        .unwrap();
    assert_eq!(unscheduled.items.len(), 7);
    let mut names = Vec::new();
    let mut lp = ListParams::default().limit(3);
    loop {
        let page = pods.list(&lp).await.unwrap();
        assert!(page.items.len() <= 3);
        names.extend(page.items.iter().filter_map(|p| p.metadata.name.clone()));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => lp = lp.continue_token(&c),
            None => break,
        }
    }
    assert_eq!(names.len(), 7);
    // All-namespace list sees them too.
    let all: Api<Pod> = Api::all(client);
    assert!(
        all.list(&ListParams::default().fields(&format!("metadata.namespace={ns}")))
            .await
            .unwrap()
            .items
            .len()
            == 7
    );
}

#[tokio::test]
async fn stale_update_conflicts_and_generation_tracks_spec() {
    let (_c, client, ns) = cluster_with_namespace().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let mut cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "c"}, "data": {"k": "1"}})).unwrap();
    cm = cms.create(&PostParams::default(), &cm).await.unwrap();
    let stale = cm.clone();
    cm.data.as_mut().unwrap().insert("k".into(), "2".into());
    let cm2 = cms.replace("c", &PostParams::default(), &cm).await.unwrap();
    assert_ne!(cm2.metadata.resource_version, stale.metadata.resource_version);
    assert_eq!(cm2.metadata.generation, Some(2));
    let err = cms
        .replace("c", &PostParams::default(), &stale)
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 409 && s.reason == "Conflict"),
        "{err:?}"
    );
    // A label change is not a spec change.
    let p = json!({"metadata": {"labels": {"x": "y"}}});
    let cm3 = cms
        .patch("c", &PatchParams::default(), &kube::api::Patch::Merge(&p))
        .await
        .unwrap();
    assert_eq!(cm3.metadata.generation, Some(2));
    // A merge patch pinning an old resourceVersion conflicts.
    let p = json!({"metadata": {"resourceVersion": stale.metadata.resource_version}, "data": {"k": "3"}});
    let err = cms
        .patch("c", &PatchParams::default(), &kube::api::Patch::Merge(&p))
        .await
        .unwrap_err();
    assert!(matches!(err, kube::Error::Api(ref s) if s.code == 409));
}

#[tokio::test]
async fn status_subresource_is_isolated() {
    let (_c, client, _ns) = cluster_with_namespace().await;
    let nodes: Api<Node> = Api::all(client.clone());
    let name = unique("node");
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"podCIDR": "10.0.0.0/24"},
        "status": {"capacity": {"cpu": "4"}}
    }))
    .unwrap();
    let created = nodes.create(&PostParams::default(), &node).await.unwrap();
    // Nodes keep the status they were created with (the kubelet registers them this way).
    assert_eq!(
        created.status.as_ref().unwrap().capacity.as_ref().unwrap()["cpu"].0,
        "4"
    );
    // A main-resource patch cannot change status...
    let p = json!({"spec": {"unschedulable": true}, "status": {"capacity": {"cpu": "8"}}});
    let n = nodes
        .patch(&name, &PatchParams::default(), &kube::api::Patch::Merge(&p))
        .await
        .unwrap();
    assert_eq!(n.spec.as_ref().unwrap().unschedulable, Some(true));
    assert_eq!(
        n.status.as_ref().unwrap().capacity.as_ref().unwrap()["cpu"].0,
        "4"
    );
    // ...and a status patch cannot change spec.
    let p = json!({"spec": {"unschedulable": false}, "status": {"capacity": {"cpu": "8"}}});
    let n = nodes
        .patch_status(&name, &PatchParams::default(), &kube::api::Patch::Merge(&p))
        .await
        .unwrap();
    assert_eq!(n.spec.as_ref().unwrap().unschedulable, Some(true));
    assert_eq!(
        n.status.as_ref().unwrap().capacity.as_ref().unwrap()["cpu"].0,
        "8"
    );
    nodes.delete(&name, &DeleteParams::default()).await.unwrap();
}

#[tokio::test]
async fn finalizers_defer_deletion() {
    let (_c, client, ns) = cluster_with_namespace().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "f", "finalizers": ["test/x"]}})).unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    cms.delete("f", &DeleteParams::default()).await.unwrap();
    let cur = cms.get("f").await.unwrap();
    assert!(cur.metadata.deletion_timestamp.is_some());
    let p = json!({"metadata": {"finalizers": null}});
    cms.patch("f", &PatchParams::default(), &kube::api::Patch::Merge(&p))
        .await
        .unwrap();
    assert!(cms.get_opt("f").await.unwrap().is_none());
}

#[tokio::test]
async fn reflector_initial_list_and_events() {
    let (_c, client, ns) = cluster_with_namespace().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    for i in 0..5 {
        pods.create(&PostParams::default(), &pod(&format!("r{i}"), &[]))
            .await
            .unwrap();
    }
    let (reader, writer) = reflector::store::<Pod>();
    let cfg = watcher::Config::default().page_size(2);
    let stream = reflector(writer, watcher(pods.clone(), cfg).default_backoff()).applied_objects();
    let task = tokio::spawn(stream.for_each(|_| async {}));
    tokio::time::timeout(Duration::from_secs(10), reader.wait_until_ready())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reader.state().len(), 5);
    pods.create(&PostParams::default(), &pod("r5", &[]))
        .await
        .unwrap();
    pods.delete("r0", &DeleteParams::default()).await.unwrap();
    let p = json!({"metadata": {"labels": {"changed": "yes"}}});
    pods.patch("r1", &PatchParams::default(), &kube::api::Patch::Merge(&p))
        .await
        .unwrap();
    eventually("reflector to see the changes", Duration::from_secs(10), || {
        let r = reader.clone();
        async move {
            let state = r.state();
            state.len() == 5
                && state.iter().all(|p| p.metadata.name.as_deref() != Some("r0"))
                && state.iter().any(|p| {
                    p.metadata
                        .labels
                        .as_ref()
                        .is_some_and(|l| l.contains_key("changed"))
                })
        }
    })
    .await;
    task.abort();
}

#[tokio::test]
async fn watch_resume_and_gone() {
    let cluster = koord_testcluster::TestCluster::start(koord_testcluster::ClusterOptions {
        history_capacity: 5,
        ..Default::default()
    })
    .await
    .unwrap();
    let client = cluster.client().unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let mk = |n: &str| serde_json::from_value::<ConfigMap>(json!({"metadata": {"name": n}})).unwrap();
    let first = cms.create(&PostParams::default(), &mk("w0")).await.unwrap();
    let rv0 = first.metadata.resource_version.clone().unwrap();
    cms.create(&PostParams::default(), &mk("w1")).await.unwrap();
    cms.create(&PostParams::default(), &mk("w2")).await.unwrap();
    // Resume from rv0: exactly the two later creations.
    let mut s = cms
        .watch(&WatchParams::default().timeout(2), &rv0)
        .await
        .unwrap()
        .boxed();
    let mut seen = Vec::new();
    while let Some(ev) = s.try_next().await.unwrap() {
        if let WatchEvent::Added(cm) = ev {
            seen.push(cm.metadata.name.unwrap());
        }
        if seen.len() == 2 {
            break;
        }
    }
    assert_eq!(seen, vec!["w1", "w2"]);
    // Push rv0 out of the 5-entry history: 410 Gone as an ERROR event.
    for i in 3..10 {
        cms.create(&PostParams::default(), &mk(&format!("w{i}")))
            .await
            .unwrap();
    }
    let mut s = cms
        .watch(&WatchParams::default().timeout(2), &rv0)
        .await
        .unwrap()
        .boxed();
    match s.try_next().await.unwrap() {
        Some(WatchEvent::Error(e)) => assert_eq!(e.code, 410),
        other => panic!("expected 410, got {other:?}"),
    }
    // Bookmarks carry the latest version.
    let cur = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut s = cms
        .watch(&WatchParams::default().timeout(3), &cur)
        .await
        .unwrap()
        .boxed();
    cms.create(&PostParams::default(), &mk("late")).await.unwrap();
    assert!(matches!(s.try_next().await.unwrap(), Some(WatchEvent::Added(_))));
}

#[tokio::test]
async fn controller_reconciles_a_change() {
    let (_c, client, ns) = cluster_with_namespace().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "ctl"}, "data": {"want": "1"}})).unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    // Reconcile: copy data.want into data.seen.
    async fn reconcile(cm: Arc<ConfigMap>, api: Arc<Api<ConfigMap>>) -> Result<Action, kube::Error> {
        let want = cm
            .data
            .as_ref()
            .and_then(|d| d.get("want"))
            .cloned()
            .unwrap_or_default();
        if cm.data.as_ref().and_then(|d| d.get("seen")) != Some(&want) {
            let p = json!({"data": {"seen": want}});
            api.patch(
                cm.metadata.name.as_deref().unwrap(),
                &PatchParams::default(),
                &kube::api::Patch::Merge(&p),
            )
            .await?;
        }
        Ok(Action::await_change())
    }
    let ctx = Arc::new(cms.clone());
    let task = tokio::spawn(
        Controller::new(cms.clone(), watcher::Config::default())
            .run(reconcile, |_, _, _| Action::requeue(Duration::from_secs(1)), ctx)
            .for_each(|_| async {}),
    );
    let seen = |v: &'static str| {
        let cms = cms.clone();
        move || {
            let cms = cms.clone();
            async move {
                cms.get("ctl")
                    .await
                    .unwrap()
                    .data
                    .unwrap()
                    .get("seen")
                    .map(String::as_str)
                    == Some(v)
            }
        }
    };
    eventually("first reconcile", Duration::from_secs(10), seen("1")).await;
    let p = json!({"data": {"want": "2"}});
    cms.patch("ctl", &PatchParams::default(), &kube::api::Patch::Merge(&p))
        .await
        .unwrap();
    eventually("reconcile after change", Duration::from_secs(10), seen("2")).await;
    task.abort();
}

#[tokio::test]
async fn garbage_requests_never_crash_the_server() {
    let (cluster, client, ns) = cluster_with_namespace().await;
    let base = cluster.url();
    let paths = [
        "/api/v1/pods".to_string(),
        format!("/api/v1/namespaces/{ns}/pods"),
        format!("/api/v1/namespaces/{ns}/pods/x"),
        format!("/api/v1/namespaces/{ns}/pods/x/status"),
        format!("/api/v1/namespaces/{ns}/pods/x/eviction"),
        format!("/api/v1/namespaces/{ns}/pods/x/binding"),
        "/api/v1/nodes/n".into(),
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions".into(),
        "/apis/coordination.k8s.io/v1/namespaces/default/leases/l".into(),
        "/apis/nope/v9/things".into(),
        "/api/v1/namespaces/default/pods?labelSelector=a%20b%20c&limit=x".into(),
        "/api/v1/namespaces/default/pods?watch=1&resourceVersion=abc".into(),
        "/api/v1/namespaces/default/pods?continue=%%%".into(),
        "/%ff/../..".into(),
    ];
    let bodies: Vec<Vec<u8>> = vec![
        vec![],
        b"null".to_vec(),
        b"[]".to_vec(),
        b"{\"metadata\": 5}".to_vec(),
        b"{\"kind\": \"Pod\", \"metadata\": {\"name\": \"UPPER\"}}".to_vec(),
        b"{\"spec\": {\"containers\": \"no\"}, \"metadata\": {\"name\": \"x\"}}".to_vec(),
        b"[{\"op\": \"move\", \"from\": \"/a\", \"path\": \"/b\"}]".to_vec(),
        b"{\"$patch\": \"delete\"}".to_vec(),
        (0..=255u8).collect(),
        "{\"metadata\":{\"name\":\"x\"}".repeat(50).into_bytes(),
    ];
    let cts = [
        "application/json",
        "application/merge-patch+json",
        "application/json-patch+json",
        "application/strategic-merge-patch+json",
        "application/apply-patch+yaml",
        "text/plain",
    ];
    let http = kube::Client::try_from(cluster.kube_config()).unwrap();
    let mut n = 0;
    for path in &paths {
        for (i, body) in bodies.iter().enumerate() {
            for method in ["POST", "PUT", "PATCH", "DELETE", "GET"] {
                let req = http::Request::builder()
                    .method(method)
                    .uri(format!(
                        "{path}{}fieldManager=fuzz",
                        if path.contains('?') { "&" } else { "?" }
                    ))
                    .header("content-type", cts[(i + n) % cts.len()])
                    .body(body.clone())
                    .unwrap();
                n += 1;
                // Any answer is fine; a 5xx other than webhook/eviction errors would be a bug.
                match http.request_text(req).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) => assert!(s.code < 500, "{method} {path}: {s:?}"),
                    Err(e) => panic!("{method} {path}: transport error {e:?} (base {base})"),
                }
            }
        }
    }
    // Still serving.
    let pods: Api<Pod> = Api::namespaced(client, &ns);
    pods.list(&ListParams::default()).await.unwrap();
}

#[tokio::test]
async fn https_mode_serves_with_its_own_ca() {
    let cluster = koord_testcluster::TestCluster::start(koord_testcluster::ClusterOptions {
        https: true,
        ..Default::default()
    })
    .await
    .unwrap();
    assert!(cluster.url().starts_with("https://"));
    assert!(cluster.kubeconfig_yaml().contains("certificate-authority-data"));
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(cluster.client().unwrap());
    let names: Vec<String> = nss
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    assert!(names.contains(&"kube-system".to_string()));
}

#[tokio::test]
async fn streaming_list_watcher_syncs() {
    let (_c, client, ns) = cluster_with_namespace().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    for i in 0..3 {
        pods.create(&PostParams::default(), &pod(&format!("s{i}"), &[]))
            .await
            .unwrap();
    }
    let (reader, writer) = reflector::store::<Pod>();
    let cfg = watcher::Config::default().streaming_lists();
    let task = tokio::spawn(
        reflector(writer, watcher(pods.clone(), cfg).default_backoff())
            .applied_objects()
            .for_each(|_| async {}),
    );
    tokio::time::timeout(Duration::from_secs(10), reader.wait_until_ready())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reader.state().len(), 3);
    pods.create(&PostParams::default(), &pod("s3", &[]))
        .await
        .unwrap();
    eventually("streamed watch sees the new pod", Duration::from_secs(10), || {
        let r = reader.clone();
        async move { r.state().len() == 4 }
    })
    .await;
    task.abort();
}

#[tokio::test]
async fn expire_watches_ends_every_watch_with_410_and_resumes_are_gone() {
    let cluster = koord_testcluster::TestCluster::start(Default::default())
        .await
        .unwrap();
    let client = cluster.client().unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let mk = |n: &str| serde_json::from_value::<ConfigMap>(json!({"metadata": {"name": n}})).unwrap();
    let rv0 = cms
        .create(&PostParams::default(), &mk("e0"))
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    cms.create(&PostParams::default(), &mk("e1")).await.unwrap();
    let mut watches = Vec::new();
    for _ in 0..3 {
        watches.push(cms.watch(&WatchParams::default(), &rv0).await.unwrap().boxed());
    }
    let rv = cluster.api_server().expire_watches();
    for mut watch in watches {
        let mut last = None;
        while let Some(ev) = watch.try_next().await.unwrap() {
            last = Some(ev);
        }
        assert!(
            matches!(last, Some(WatchEvent::Error(ref e)) if e.code == 410),
            "{last:?}"
        );
    }
    // Resuming from before the storm is 410; from the list's version it works.
    let mut resumed = cms
        .watch(&WatchParams::default().timeout(2), &rv0)
        .await
        .unwrap()
        .boxed();
    assert!(matches!(resumed.try_next().await.unwrap(), Some(WatchEvent::Error(e)) if e.code == 410));
    let mut fresh = cms
        .watch(&WatchParams::default().timeout(3), &rv.to_string())
        .await
        .unwrap()
        .boxed();
    cms.create(&PostParams::default(), &mk("e2")).await.unwrap();
    assert!(matches!(
        fresh.try_next().await.unwrap(),
        Some(WatchEvent::Added(_))
    ));
}

/// `as=PartialObjectMetadata[List]` content negotiation: kube-rs' metadata requests and watches
/// get the metadata-only form, a mismatched form is 406, as from kube-apiserver.
#[tokio::test]
async fn metadata_only_get_list_and_watch() {
    let (_c, client, ns) = cluster_with_namespace().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    for i in 0..3 {
        pods.create(&PostParams::default(), &pod(&format!("m{i}"), &[("app", "web")]))
            .await
            .unwrap();
    }
    let raw = |accept: &str, path: String| {
        http::Request::get(path)
            .header("accept", accept)
            .body(Vec::new())
            .unwrap()
    };
    let list_form = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
    let object_form = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
    let list: serde_json::Value = serde_json::from_str(
        &client
            .request_text(raw(list_form, Pod::url_path(&(), Some(&ns))))
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(list["kind"], "PartialObjectMetadataList");
    assert_eq!(list["apiVersion"], "meta.k8s.io/v1");
    assert!(list["metadata"]["resourceVersion"].is_string());
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 3);
    for item in items {
        assert_eq!(item["kind"], "PartialObjectMetadata");
        assert_eq!(item["metadata"]["labels"]["app"], "web");
        assert!(
            item.get("spec").is_none() && item.get("status").is_none(),
            "{item}"
        );
    }
    let one: serde_json::Value = serde_json::from_str(
        &client
            .request_text(raw(object_form, format!("{}/m0", Pod::url_path(&(), Some(&ns)))))
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(one["kind"], "PartialObjectMetadata");
    assert_eq!(one["metadata"]["name"], "m0");
    assert!(one.get("spec").is_none());
    // The object form on a list, and the list form on an object, are not acceptable.
    for (accept, path) in [
        (object_form, Pod::url_path(&(), Some(&ns))),
        (list_form, format!("{}/m0", Pod::url_path(&(), Some(&ns)))),
    ] {
        let err = client.request_text(raw(accept, path)).await.unwrap_err();
        assert!(matches!(err, kube::Error::Api(ref s) if s.code == 406), "{err:?}");
    }

    // kube-rs' typed metadata calls and a metadata watcher.
    let listed = pods.list_metadata(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 3);
    assert_eq!(
        listed.items[0].types.as_ref().map(|t| t.kind.as_str()),
        Some("PartialObjectMetadata")
    );
    let (reader, writer) = reflector::store();
    let metadata: Api<kube::core::PartialObjectMeta<Pod>> = Api::namespaced(client.clone(), &ns);
    let stream = reflector(
        writer,
        watcher(metadata, watcher::Config::default()).default_backoff(),
    )
    .applied_objects();
    let task = tokio::spawn(stream.for_each(|_| async {}));
    tokio::time::timeout(Duration::from_secs(10), reader.wait_until_ready())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reader.state().len(), 3);
    let p = json!({"metadata": {"labels": {"changed": "yes"}}});
    pods.patch("m1", &PatchParams::default(), &kube::api::Patch::Merge(&p))
        .await
        .unwrap();
    eventually(
        "the metadata watch to see the label",
        Duration::from_secs(10),
        || {
            let r = reader.clone();
            async move {
                r.state().iter().any(|p| {
                    p.metadata.name.as_deref() == Some("m1")
                        && p.metadata
                            .labels
                            .as_ref()
                            .is_some_and(|l| l.contains_key("changed"))
                        && p.types
                            .as_ref()
                            .is_some_and(|t| t.kind == "PartialObjectMetadata")
                })
            }
        },
    )
    .await;
    task.abort();
}
