use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use super::{PodValidationOptions, validate_pod};

fn pod(value: serde_json::Value) -> Pod {
    serde_json::from_value(value).unwrap()
}

fn be_pod(priority: Option<i32>, batch_cpu: &str) -> Pod {
    let mut value = json!({
        "metadata": {"name": "p", "labels": {"koordinator.sh/qosClass": "BE"}},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"kubernetes.io/batch-cpu": batch_cpu}}}]}
    });
    if let Some(priority) = priority {
        value["spec"]["priority"] = json!(priority);
    }
    pod(value)
}

fn fields(pod: &Pod, old: Option<&Pod>) -> Vec<String> {
    validate_pod(pod, old, PodValidationOptions::default())
        .into_iter()
        .map(|v| v.to_string())
        .collect()
}

#[test]
fn be_pod_with_batch_priority_and_batch_resources_is_valid() {
    assert!(fields(&be_pod(Some(5000), "1000"), None).is_empty());
}

#[test]
fn seed_002_be_pod_is_valid() {
    let pod: Pod = serde_yaml::from_str(include_str!("../../tests/fixtures/seed002_be_pod.yaml")).unwrap();
    assert_eq!(fields(&pod, None), Vec::<String>::new());
}

#[test]
fn table_of_qos_priority_pairs() {
    // (qos, priority, forbidden)
    let cases = [
        ("BE", None, true),
        ("BE", Some(9500), true),
        ("BE", Some(7500), false),
        ("BE", Some(5500), false),
        ("BE", Some(3500), false),
        ("LSR", None, true),
        ("LSR", Some(9000), false),
        ("LSR", Some(7000), true),
        ("LSR", Some(5000), true),
        ("LSR", Some(3000), true),
        ("LS", None, false),
        ("LS", Some(5000), false),
    ];
    for (qos, priority, forbidden) in cases {
        let mut value = json!({
            "metadata": {"labels": {"koordinator.sh/qosClass": qos}},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}]}
        });
        if let Some(priority) = priority {
            value["spec"]["priority"] = json!(priority);
        }
        let found = fields(&pod(value), None);
        let has = found.iter().any(|f| f.contains("cannot be used in combination"));
        assert_eq!(has, forbidden, "{qos} {priority:?}: {found:?}");
    }
}

#[test]
fn batch_resources_need_qos_be() {
    let pod = pod(json!({
        "metadata": {"labels": {"koordinator.sh/qosClass": "LS"}},
        "spec": {"priority": 5000, "containers": [{"name": "c", "resources": {"requests": {"kubernetes.io/batch-memory": "1Gi"}}}]}
    }));
    assert_eq!(
        fields(&pod, None),
        vec![
            "metadata.labels[koordinator.sh/qosClass]: is \"LS\" but a pod requesting kubernetes.io/batch-memory (koordinator colocation resources) must have QoS BE"
        ]
    );
}

#[test]
fn lsr_and_lse_need_whole_cores() {
    for (cpu, ok) in [("2", true), ("1500m", false), ("0", false), ("1000m", true)] {
        for qos in ["LSR", "LSE"] {
            let pod = pod(json!({
                "metadata": {"labels": {"koordinator.sh/qosClass": qos}},
                "spec": {"priority": 9000, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}
            }));
            let found = fields(&pod, None);
            assert_eq!(found.is_empty(), ok, "{qos} {cpu}: {found:?}");
        }
    }
}

#[test]
fn lsr_without_cpu_request_is_rejected() {
    let pod = pod(json!({
        "metadata": {"labels": {"koordinator.sh/qosClass": "LSR"}},
        "spec": {"priority": 9000, "containers": [{"name": "c"}]}
    }));
    assert_eq!(
        fields(&pod, None),
        vec![
            "spec.containers[*].resources.requests.cpu: QoS LSR needs a non-zero whole number of CPUs, the pod requests 0m"
        ]
    );
}

#[test]
fn update_may_not_change_qos_priority_or_sub_priority() {
    let old = pod(json!({
        "metadata": {"labels": {"koordinator.sh/qosClass": "BE", "koordinator.sh/priority": "10"}},
        "spec": {"priority": 5000, "containers": [{"name": "c"}]}
    }));
    let new = pod(json!({
        "metadata": {"labels": {"koordinator.sh/qosClass": "LS", "koordinator.sh/priority": "20"}},
        "spec": {"priority": 9000, "containers": [{"name": "c"}]}
    }));
    let found = fields(&new, Some(&old));
    assert!(found.contains(&"metadata.labels[koordinator.sh/qosClass]: is immutable: Some(\"BE\") cannot change to Some(\"LS\")".to_string()), "{found:?}");
    assert!(
        found
            .iter()
            .any(|f| f.starts_with("metadata.labels[koordinator.sh/priority]: is immutable"))
    );
    assert!(
        found
            .iter()
            .any(|f| f.starts_with("spec.priority: the Koordinator priority class is immutable"))
    );
    let allowed = validate_pod(
        &new,
        Some(&old),
        PodValidationOptions {
            allow_priority_label_update: true,
        },
    );
    assert!(
        !allowed
            .iter()
            .any(|v| v.field == "metadata.labels[koordinator.sh/priority]")
    );
    assert!(fields(&old, Some(&old)).is_empty());
}

#[test]
fn unparsable_cpu_is_reported_not_panicking() {
    let pod = pod(json!({
        "metadata": {"labels": {"koordinator.sh/qosClass": "LSR"}},
        "spec": {"priority": 9000, "containers": [{"name": "c", "resources": {"requests": {"cpu": "lots"}}}]}
    }));
    let found = fields(&pod, None);
    assert!(
        found
            .iter()
            .any(|f| f.starts_with("spec.containers[0].resources.requests.cpu:")),
        "{found:?}"
    );
}
