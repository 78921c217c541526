//! NUMA-level batch resources against the embedded API server: the manager writes the batch
//! entries of each zone of the node's NodeResourceTopology, keeps every other writer's zones,
//! resources and fields, writes nothing more in a steady state, follows a zone's allocatable
//! when another writer changes it, and leaves the object alone when the report goes stale.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::Pod;
use koord_api::{NodeMetric, topology::NodeResourceTopology};
use koord_test_support::eventually;
use kube::{
    Api, Client,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};

const GB: i64 = 1_000_000_000;

fn resource(name: &str, amount: &str) -> Value {
    json!({"name": name, "capacity": amount, "allocatable": amount, "available": amount})
}

/// As koordlet and another agent write it: two NUMA zones of 50 cores / 60 G, a GPU on node-0,
/// distances between the zones.
async fn create_topology(client: &Client, node: &str) {
    let nrt = json!({
        "apiVersion": "topology.node.k8s.io/v1alpha1",
        "kind": "NodeResourceTopology",
        "metadata": {"name": node, "annotations": {"example.com/agent": "kept"}},
        "topologyPolicies": ["None"],
        "zones": [
            {"name": "node-0", "type": "Node", "costs": [{"name": "node-1", "value": 20}],
             "resources": [resource("cpu", "50"), resource("example.com/gpu", "1"), resource("memory", "60G")]},
            {"name": "node-1", "type": "Node", "costs": [{"name": "node-0", "value": 20}],
             "resources": [resource("cpu", "50"), resource("memory", "60G")]},
        ],
    });
    let nrt: NodeResourceTopology = serde_json::from_value(nrt).unwrap();
    Api::<NodeResourceTopology>::all(client.clone())
        .create(&PostParams::default(), &nrt)
        .await
        .unwrap();
}

/// A prod pod the scheduler placed on NUMA node 0, requesting 10 cores / 10 G (not reported
/// by koordlet yet, so its request counts).
async fn create_pod_on_numa_0(client: &Client, node: &str) {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "ls", "namespace": NS, "annotations": {
            "scheduling.koordinator.sh/resource-status": r#"{"cpuset":"0-9","numaNodeResources":[{"node":0,"resources":{"cpu":"10","memory":"10G"}}]}"#}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x",
            "resources": {"requests": {"cpu": "10", "memory": "10G"}, "limits": {"cpu": "10", "memory": "10G"}}}]},
    });
    let pod: Pod = serde_json::from_value(pod).unwrap();
    Api::<Pod>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
}

async fn zones(client: &Client, node: &str) -> Vec<Value> {
    Api::<NodeResourceTopology>::all(client.clone())
        .get(node)
        .await
        .unwrap()
        .zones
}

/// A zone's resource entry by name.
fn entry<'a>(zones: &'a [Value], zone: &str, name: &str) -> Option<&'a Value> {
    zones
        .iter()
        .find(|z| z["name"] == zone)?
        .get("resources")?
        .as_array()?
        .iter()
        .find(|r| r["name"] == name)
}

/// A batch entry's value when capacity, allocatable and available agree (canonical form).
fn batch_value(zones: &[Value], zone: &str, name: &str) -> Option<String> {
    let entry = entry(zones, zone, name)?;
    let values: Vec<String> = ["capacity", "allocatable", "available"]
        .iter()
        .map(|field| canonical(entry[*field].as_str().unwrap_or_default()))
        .collect();
    values.iter().all(|v| *v == values[0]).then(|| values[0].clone())
}

fn nrt_writes(writes: &[String]) -> Vec<String> {
    writes
        .iter()
        .filter(|w| w.contains("/noderesourcetopologies/"))
        .cloned()
        .collect()
}

#[tokio::test]
async fn zone_batch_entries_are_written_once_and_other_writers_entries_survive() {
    let (_cluster, client) = cluster().await;
    config_map(
        &client,
        &[(
            "colocation-config",
            r#"{"enable": true, "cpuReclaimThresholdPercent": 65, "memoryReclaimThresholdPercent": 65}"#,
        )],
    )
    .await;
    add_node(&client, "n1").await;
    create_topology(&client, "n1").await;
    create_pod_on_numa_0(&client, "n1").await;
    let (recording, traffic) = recording_client(&client);
    let (_stop, _task) = start(&recording, args(false, 30, "m1"));
    wait_node_metric(&client, "n1").await;
    // No report yet: degraded, the object is left as it is.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(nrt_writes(&traffic.writes()).is_empty(), "{:?}", traffic.writes());

    // System usage 7 cores / 12 G → 3500 / 6 G per zone; margin 35 % of 50 cores / 60 G.
    // node-0: 50000 − 17500 − 3500 − 10000 (the pod) = 19000; 60 − 21 − 6 − 10 = 23 G.
    // node-1: 50000 − 17500 − 3500 = 29000; 60 − 21 − 6 = 33 G.
    report_usage(&client, "n1", "7").await;
    let expected = [
        ("node-0", "kubernetes.io/batch-cpu", 19_000),
        ("node-0", "kubernetes.io/batch-memory", 23 * GB),
        ("node-1", "kubernetes.io/batch-cpu", 29_000),
        ("node-1", "kubernetes.io/batch-memory", 33 * GB),
    ];
    eventually("batch entries in both zones", PATIENCE, || async {
        let zones = zones(&client, "n1").await;
        expected
            .iter()
            .all(|(zone, name, value)| batch_value(&zones, zone, name) == Some(canonical(&value.to_string())))
    })
    .await;
    // The write is explained on the Node, zone by zone.
    eventually(
        "a NUMAZoneBatchResourceUpdated Event on the Node",
        PATIENCE,
        || async {
            let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(client.clone());
            events
                .list(&Default::default())
                .await
                .unwrap()
                .items
                .iter()
                .any(|e| {
                    e.reason.as_deref() == Some("NUMAZoneBatchResourceUpdated")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("n1")
                        && e.note
                            .as_deref()
                            .is_some_and(|n| n.contains("node-0") && n.contains("node-1"))
                })
        },
    )
    .await;

    // Everything else is as the other writers left it; entries stay sorted by name.
    let nrt = Api::<NodeResourceTopology>::all(client.clone())
        .get("n1")
        .await
        .unwrap();
    assert_eq!(nrt.annotation("example.com/agent"), Some("kept"));
    assert_eq!(nrt.topology_policies, ["None"]);
    let zone0 = &nrt.zones[0];
    assert_eq!(zone0["costs"], json!([{"name": "node-1", "value": 20}]));
    let names: Vec<&str> = zone0["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "cpu",
            "example.com/gpu",
            "kubernetes.io/batch-cpu",
            "kubernetes.io/batch-memory",
            "memory"
        ]
    );
    assert_eq!(
        entry(&nrt.zones, "node-0", "example.com/gpu"),
        Some(&resource("example.com/gpu", "1"))
    );

    // Steady state: several resyncs, no further write of the object.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let settled = nrt_writes(&traffic.writes());
    assert_eq!(settled.len(), 1, "{settled:?}");
    assert!(settled[0].starts_with("PUT "), "{settled:?}");
    let version = Api::<NodeResourceTopology>::all(client.clone())
        .get("n1")
        .await
        .unwrap()
        .metadata
        .resource_version;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(nrt_writes(&traffic.writes()), settled, "a steady state wrote");
    let nrt = Api::<NodeResourceTopology>::all(client.clone())
        .get("n1")
        .await
        .unwrap();
    assert_eq!(nrt.metadata.resource_version, version);

    // Another writer shrinks node-1 to 40 cores (a merge patch replaces the atomic zone list,
    // as that writer would): node-1's batch-cpu follows, 40000 − 14000 − 3500 = 22500, and
    // the writer's cpu entry stays as it wrote it.
    let mut changed = nrt.zones.clone();
    changed[1]["resources"][0] = resource("cpu", "40");
    Api::<NodeResourceTopology>::all(client.clone())
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(json!({"zones": changed})),
        )
        .await
        .unwrap();
    eventually("node-1 follows its allocatable", PATIENCE, || async {
        let zones = zones(&client, "n1").await;
        batch_value(&zones, "node-1", "kubernetes.io/batch-cpu") == Some(canonical("22500"))
    })
    .await;
    let zones_after_change = zones(&client, "n1").await;
    let changed_zones = &zones_after_change;
    assert_eq!(
        entry(changed_zones, "node-1", "cpu"),
        Some(&resource("cpu", "40"))
    );
    assert_eq!(
        entry(changed_zones, "node-0", "example.com/gpu"),
        Some(&resource("example.com/gpu", "1"))
    );
    assert_eq!(
        batch_value(changed_zones, "node-0", "kubernetes.io/batch-cpu"),
        Some(canonical("19000"))
    );

    // The report goes stale: the node's batch resources are removed, the zones are left as
    // they are (as upstream).
    let stale = (jiff::Timestamp::now() - jiff::SignedDuration::from_mins(60)).to_string();
    Api::<NodeMetric>::all(client.clone())
        .patch_status(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"updateTime": stale}})),
        )
        .await
        .unwrap();
    eventually("batch-cpu removed from the node", PATIENCE, || async {
        batch_cpu(&client, "n1").await.is_none()
    })
    .await;
    let before = nrt_writes(&traffic.writes());
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        nrt_writes(&traffic.writes()),
        before,
        "a degraded node's zones were written"
    );
    assert_eq!(zones(&client, "n1").await, zones_after_change);
}
