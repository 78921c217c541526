//! The CRD objects and pods of the seed documents parse verbatim and read through the
//! well-known names; every object survives a serialize/deserialize round trip.

// Test helpers panic on purpose: a failure is a test failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use koord_api::nodemetric::PodMetricInfo;
use koord_api::priority::{priority_class_raw, priority_class_with_default};
use koord_api::qos::{kube_qos_class, qos_class_raw, qos_class_with_default};
use koord_api::quantity::{ExactQuantity, amounts_from_list};
use koord_api::resources::{
    CpuMemory, container_amounts, pod_batch_requests, pod_cpu_memory_requests, requests_batch_resources,
};
use koord_api::{ClusterColocationProfile, KubeQoSClass, NodeMetric, NodeSLO, PriorityClass, QoSClass};
use serde::Serialize;
use serde::de::DeserializeOwned;

fn fixture<T: DeserializeOwned>(name: &str) -> T {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// JSON and YAML round trips give back an equal value.
fn assert_round_trips<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(value: &T) {
    let json = serde_json::to_string(value).unwrap();
    assert_eq!(
        &serde_json::from_str::<T>(&json).unwrap(),
        value,
        "JSON round trip of {json}"
    );
    let yaml = serde_yaml::to_string(value).unwrap();
    assert_eq!(
        &serde_yaml::from_str::<T>(&yaml).unwrap(),
        value,
        "YAML round trip of {yaml}"
    );
}

fn milli(q: &str) -> i64 {
    ExactQuantity::parse(q).unwrap().milli_value().unwrap()
}

#[test]
fn seed_001_node_metric() {
    let metric: NodeMetric = fixture("seed-001-nodemetric.yaml");
    assert_eq!(metric.metadata.name.as_deref(), Some("node-1"));
    assert_eq!(metric.spec.metric_collect_policy, None);
    let status = metric.status.as_ref().expect("status");
    assert_eq!(status.update_time, None);
    let node = amounts_from_list(&status.node_metric.as_ref().unwrap().node_usage.resources).unwrap();
    assert_eq!(
        CpuMemory::from_amounts(&node),
        CpuMemory {
            cpu_milli: 138,
            memory_bytes: 1_815_637_738
        }
    );
    let pods: &Vec<PodMetricInfo> = status.pods_metric.as_ref().unwrap();
    assert_eq!(pods.len(), 1);
    assert_eq!(pods[0].name, "storage-service-6c7c59f868-k72r5");
    assert_eq!(pods[0].namespace, "default");
    let pod = amounts_from_list(&pods[0].pod_usage.resources).unwrap();
    assert_eq!(
        CpuMemory::from_amounts(&pod),
        CpuMemory {
            cpu_milli: 300,
            memory_bytes: 17_828 * 1024
        }
    );
    assert_eq!(pods[0].priority_class(), PriorityClass::None);
    assert_eq!(pods[0].qos_class(), QoSClass::None);
    assert_round_trips(&metric);
}

#[test]
fn seed_001_cluster_colocation_profile() {
    let profile: ClusterColocationProfile = fixture("seed-001-clustercolocationprofile.yaml");
    let spec = &profile.spec;
    assert_eq!(
        profile.metadata.name.as_deref(),
        Some("colocation-profile-example")
    );
    let ns_labels = spec
        .namespace_selector
        .as_ref()
        .and_then(|s| s.match_labels.clone())
        .unwrap();
    assert_eq!(
        ns_labels,
        BTreeMap::from([("koordinator.sh/enable-colocation".to_owned(), "true".to_owned())])
    );
    let pod_labels = spec
        .selector
        .as_ref()
        .and_then(|s| s.match_labels.clone())
        .unwrap();
    assert_eq!(
        pod_labels["sparkoperator.k8s.io/launched-by-spark-operator"],
        "true"
    );
    assert_eq!(spec.qos(), Some(QoSClass::Be));
    assert_eq!(
        spec.priority_class_name.as_deref(),
        Some(PriorityClass::Batch.name())
    );
    assert_eq!(spec.koordinator_priority, Some(1000));
    assert_eq!(spec.scheduler_name.as_deref(), Some("koord-scheduler"));
    assert_eq!(spec.labels.as_ref().unwrap()["koordinator.sh/mutated"], "true");
    assert_eq!(
        spec.annotations.as_ref().unwrap()["koordinator.sh/intercepted"],
        "true"
    );
    assert_eq!(
        spec.patch,
        Some(serde_json::json!({"spec": {"terminationGracePeriodSeconds": 30}}))
    );
    assert_eq!(spec.probability, None);
    assert_eq!(spec.probability_percent(), Ok(100));
    assert_round_trips(&profile);

    let mut with_percent = profile.clone();
    with_percent.spec.probability = Some(IntOrString::String("50%".into()));
    assert_round_trips(&with_percent);
    assert_eq!(with_percent.spec.probability_percent(), Ok(50));
}

#[test]
fn seed_002_be_pod_demo() {
    let pod: Pod = fixture("seed-002-be-pod-demo.yaml");
    assert_eq!(qos_class_raw(&pod), QoSClass::Be);
    assert_eq!(qos_class_with_default(&pod), QoSClass::Be);
    // priorityClassName alone sets no spec.priority before admission: raw is None, and the BE
    // QoS makes it Batch.
    assert_eq!(priority_class_raw(&pod), PriorityClass::None);
    assert_eq!(priority_class_with_default(&pod), PriorityClass::Batch);
    assert_eq!(
        pod.spec.as_ref().unwrap().priority_class_name.as_deref(),
        Some("koord-batch")
    );
    // Batch resources are not cpu/memory: Kubernetes sees a BestEffort pod.
    assert_eq!(kube_qos_class(&pod), Some(KubeQoSClass::BestEffort));
    assert!(requests_batch_resources(&pod));
    assert_eq!(
        pod_batch_requests(&pod),
        Ok(CpuMemory {
            cpu_milli: 4000,
            memory_bytes: 4 << 30
        })
    );
    assert_eq!(pod_cpu_memory_requests(&pod), Ok(CpuMemory::default()));
    let container = container_amounts(&pod.spec.as_ref().unwrap().containers[0]).unwrap();
    assert_eq!(container.batch_cpu_limit(), Some(4000));
    assert_eq!(container.batch_memory_limit(), Some(4 << 30));
    assert_round_trips(&pod);
}

#[test]
fn seed_004_spark_driver_pod() {
    let pod: Pod = fixture("seed-004-spark-driver-pod.yaml");
    assert_eq!(qos_class_raw(&pod), QoSClass::Be);
    assert_eq!(priority_class_with_default(&pod), PriorityClass::Batch);
    assert_eq!(pod.metadata.labels.as_ref().unwrap()["spark-role"], "driver");
    assert_eq!(
        pod_batch_requests(&pod),
        Ok(CpuMemory {
            cpu_milli: 1000,
            memory_bytes: 3456 << 20
        })
    );
    let container = container_amounts(&pod.spec.as_ref().unwrap().containers[0]).unwrap();
    assert_eq!(container.batch_cpu_limit(), Some(1000));
    assert_eq!(container.batch_memory_request(), Some(3_623_878_656));
    assert_round_trips(&pod);
}

#[test]
fn quantities_of_the_seeds() {
    assert_eq!(milli("4k"), 4_000_000);
    assert_eq!(ExactQuantity::parse("4k").unwrap().value(), 4000);
    assert_eq!(ExactQuantity::parse("3456Mi").unwrap().value(), 3_623_878_656);
    assert_eq!(milli("138m"), 138);
    // seed 001's node: batch-cpu 4541 (milli-cores as an integer), memory 32611012Ki.
    assert_eq!(ExactQuantity::parse("4541").unwrap().value(), 4541);
    assert_eq!(
        ExactQuantity::parse("32611012Ki").unwrap().value(),
        32_611_012 * 1024
    );
    assert_eq!(milli("7800m"), 7800);
}

#[test]
fn unknown_fields_under_extensions_survive() {
    let extensions = serde_json::json!({
        "vendor.example/strategy": {"enable": true, "nested": {"list": [1, "two", null], "ratio": 0.5}},
        "Object": {"kept": "as is"}
    });
    let slo: NodeSLO = serde_json::from_value(serde_json::json!({
        "apiVersion": "slo.koordinator.sh/v1alpha1",
        "kind": "NodeSLO",
        "metadata": {"name": "node-1"},
        "spec": {"extensions": extensions}
    }))
    .unwrap();
    let back = serde_json::to_value(&slo).unwrap();
    assert_eq!(back["spec"]["extensions"], extensions);
    assert_round_trips(&slo);

    let metric: NodeMetric = serde_json::from_value(serde_json::json!({
        "apiVersion": "slo.koordinator.sh/v1alpha1",
        "kind": "NodeMetric",
        "metadata": {"name": "node-1"},
        "spec": {"metricCollectPolicy": {"aggregateDurationSeconds": 300, "nodeMemoryCollectPolicy": "usageWithHotPageCache",
                 "nodeAggregatePolicy": {"durations": ["5m0s", "10m0s"]}}},
        "status": {
            "updateTime": "2026-11-22T02:00:00Z",
            "podsMetric": [{"name": "p", "namespace": "n", "priority": "koord-batch", "qos": "BE",
                            "podUsage": {"resources": {"cpu": "1"}}, "extensions": extensions}],
            "nodeMetric": {
                "nodeUsage": {"resources": {"cpu": "2", "memory": "4Gi"}},
                "aggregatedNodeUsages": [{"usage": {"p90": {"resources": {"cpu": "3"}}}, "duration": "5m0s"}],
                "numaUsages": [{"numaNodeID": 1, "nodeUsage": {"resources": {"cpu": "1"}}}]
            },
            "hostApplicationMetric": [{"name": "nginx", "priority": "koord-prod", "usage": {"resources": {"cpu": "100m"}}}],
            "prodReclaimableMetric": {"resource": {"resources": {"cpu": "5"}}},
            "prodPeakMetric": {"resource": {"resources": {"memory": "1Gi"}}},
            "fieldFromANewerKoordlet": {"ignored": true}
        }
    }))
    .unwrap();
    let status = metric.status.as_ref().unwrap();
    let back = serde_json::to_value(&metric).unwrap();
    assert_eq!(back["status"]["podsMetric"][0]["extensions"], extensions);
    assert_eq!(
        status.pods_metric.as_ref().unwrap()[0].priority_class(),
        PriorityClass::Batch
    );
    assert_eq!(status.pods_metric.as_ref().unwrap()[0].qos_class(), QoSClass::Be);
    assert_eq!(
        status.host_application_metric.as_ref().unwrap()[0].priority_class(),
        PriorityClass::Prod
    );
    let node = status.node_metric.as_ref().unwrap();
    let p90 = node.aggregated_node_usages.as_ref().unwrap()[0]
        .get("p90")
        .unwrap();
    assert_eq!(p90.resources["cpu"].0, "3");
    assert_eq!(node.numa_usages.as_ref().unwrap()[0].numa_node_id, 1);
    assert!(status.update_time.is_some());
    assert_eq!(
        status.prod_peak_metric.as_ref().unwrap().resource.resources["memory"].0,
        "1Gi"
    );
    assert_round_trips(&metric);
}

#[test]
fn device_usage_parses_as_upstream_writes_it() {
    let metric: NodeMetric = serde_yaml::from_str(
        r#"
apiVersion: slo.koordinator.sh/v1alpha1
kind: NodeMetric
metadata: {name: gpu-node}
spec: {}
status:
  nodeMetric:
    nodeUsage:
      resources: {cpu: 500m}
      devices:
      - id: GPU-8c25ea37-2909-6e62-b7bf-e2fcadebea8d
        minor: 0
        type: gpu
        health: true
        resources: {koordinator.sh/gpu-core: "50", koordinator.sh/gpu-memory: 8Gi}
        topology: {socketID: 0, nodeID: 0, pcieID: pci0000:3a, busID: "0000:3b:00.0"}
"#,
    )
    .unwrap();
    let device = &metric
        .status
        .as_ref()
        .unwrap()
        .node_metric
        .as_ref()
        .unwrap()
        .node_usage
        .devices[0];
    assert_eq!(
        device.uuid.as_deref(),
        Some("GPU-8c25ea37-2909-6e62-b7bf-e2fcadebea8d")
    );
    assert!(device.health);
    assert_eq!(device.topology.as_ref().unwrap().pcie_id, "pci0000:3a");
    assert_round_trips(&metric);
}

/// The API server keeps custom-resource JSON as written, so a quantity may arrive as a number.
#[test]
fn numeric_quantities_in_custom_resources_parse() {
    let metric: NodeMetric = serde_yaml::from_str(
        "apiVersion: slo.koordinator.sh/v1alpha1\nkind: NodeMetric\nmetadata: {name: n}\nspec: {}\n\
         status: {nodeMetric: {nodeUsage: {resources: {cpu: 4, memory: 1815637738}}}}\n",
    )
    .unwrap();
    let usage = amounts_from_list(&metric.status.unwrap().node_metric.unwrap().node_usage.resources).unwrap();
    assert_eq!(
        CpuMemory::from_amounts(&usage),
        CpuMemory {
            cpu_milli: 4000,
            memory_bytes: 1_815_637_738
        }
    );
}

#[test]
fn node_slo_uses_upstream_json_names_for_cpu_evict_fields() {
    // Upstream's json tags spell the acronym in capitals: `cpuEvictBESatisfaction...`. A NodeSLO
    // written by upstream tooling must keep these settings (and the CRD must not prune them).
    let slo: NodeSLO = serde_json::from_value(serde_json::json!({
        "apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO",
        "metadata": {"name": "n1"},
        "spec": {"resourceUsedThresholdWithBE": {
            "cpuEvictBESatisfactionLowerPercent": 60,
            "cpuEvictBESatisfactionUpperPercent": 80,
            "cpuEvictBEUsageThresholdPercent": 90}}
    }))
    .unwrap();
    let t = slo.spec.resource_used_threshold_with_be.clone().unwrap();
    assert_eq!(
        (
            t.cpu_evict_be_satisfaction_lower_percent,
            t.cpu_evict_be_satisfaction_upper_percent,
            t.cpu_evict_be_usage_threshold_percent
        ),
        (Some(60), Some(80), Some(90))
    );
    let text = serde_json::to_string(&slo).unwrap();
    for name in [
        "cpuEvictBESatisfactionLowerPercent",
        "cpuEvictBESatisfactionUpperPercent",
        "cpuEvictBEUsageThresholdPercent",
    ] {
        assert!(text.contains(name), "{name} missing in {text}");
    }
    assert_round_trips(&slo);
}
