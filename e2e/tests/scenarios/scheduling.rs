//! koord-scheduler on a real cluster: seed 001's ClusterColocationProfile sets `schedulerName:
//! koord-scheduler`; the chart's kube-scheduler answers to that name and places the mutated BE
//! pod through koord-scheduler-extender. The embedded cluster's scheduler has its own test with
//! the real extender (`tests/extender_placement.rs`: spreading by headroom, stale node skipped).

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use koord_api::ClusterColocationProfile;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use crate::common::{self, wait_for};
use crate::env::{Env, Load, Wanted};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed001_profile_pods_are_scheduled_by_koord_scheduler_through_the_extender() {
    let env = Env::start(Wanted::default()).await;
    if !env.is_real() {
        println!(
            "skipped: the embedded cluster runs no kube-scheduler (tests/extender_placement.rs covers the extender there)"
        );
        return;
    }
    let namespace = std::env::var("KOORD_E2E_NAMESPACE").unwrap_or_else(|_| "koordinator-system".into());
    let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), &namespace);
    for name in ["koord-scheduler", "koord-scheduler-extender"] {
        wait_for(
            &format!("deployment {name} available"),
            Duration::from_secs(120),
            async || {
                let d = deployments.get(name).await.ok()?;
                (d.status?.available_replicas.unwrap_or(0) >= 1).then_some(())
            },
        )
        .await;
    }

    let key = common::unique("e2e");
    let mut cleanup = env
        .namespace("koord-sched", json!({"koord-e2e.koordinator.sh/colocation": key}))
        .await;
    let ns = cleanup.ns().to_string();
    // Seed 001's profile, scoped to this test's namespace.
    let profile = common::unique("e2e-seed001");
    let p: ClusterColocationProfile = serde_json::from_value(json!({
        "metadata": {"name": profile},
        "spec": {
            "namespaceSelector": {"matchLabels": {"koord-e2e.koordinator.sh/colocation": key}},
            "qosClass": "BE", "priorityClassName": "koord-batch", "koordinatorPriority": 1000,
            "schedulerName": "koord-scheduler",
            "labels": {"koordinator.sh/mutated": "true"},
            "annotations": {"koordinator.sh/intercepted": "true"},
            "patch": {"spec": {"terminationGracePeriodSeconds": 30}},
        }
    }))
    .unwrap();
    Api::<ClusterColocationProfile>::all(env.client.clone())
        .create(&PostParams::default(), &p)
        .await
        .unwrap();
    cleanup.profiles.push(profile);

    // The mutated pod asks for 100 batch-cpu: wait until a node offers that much.
    common::wait_for_batch_cpu(&env.client, 100).await;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), &ns);
    let resources =
        json!({"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"cpu": "200m", "memory": "64Mi"}});
    let pod = env.pod(
        "be",
        json!({"app": "be"}),
        vec![env.container("main", Load::Idle, resources)],
    );
    let created = common::create_until_mutated_to_be(&pods, &pod).await;
    assert_eq!(
        created.spec.as_ref().and_then(|s| s.scheduler_name.as_deref()),
        Some("koord-scheduler")
    );
    // Only koord-scheduler binds pods of that name: Running means it scheduled the pod (after
    // the extender's filter and prioritize calls, `ignorable: false`).
    let running = env.wait_running(&ns, "be").await;
    let node = running.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap();
    println!("seed 001 BE pod scheduled by koord-scheduler on {node}");
    let scheduled = running
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "PodScheduled" && c.status == "True"));
    assert!(scheduled);
}
