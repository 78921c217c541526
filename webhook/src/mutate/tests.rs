use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

use super::profile::CompiledProfile;
use super::{MutateError, MutationOptions, mutate_pod};
use crate::view::StaticView;

fn profile(value: Value) -> Arc<CompiledProfile> {
    Arc::new(CompiledProfile::from_json(&value).unwrap())
}

fn pod(value: Value) -> Pod {
    serde_json::from_value(value).unwrap()
}

fn view(profiles: Vec<Arc<CompiledProfile>>) -> StaticView {
    let mut view = StaticView::with_koordinator_priority_classes();
    view.profiles = profiles;
    view.namespaces.insert(
        "spark".into(),
        BTreeMap::from([("koordinator.sh/enable-colocation".into(), "true".into())]),
    );
    view.namespaces.insert("default".into(), BTreeMap::new());
    view
}

fn always() -> impl FnMut() -> u32 {
    || 0
}

fn plain_pod() -> Pod {
    pod(json!({
        "metadata": {"name": "p", "namespace": "default", "labels": {"app": "x", "team": "a"}},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]}
    }))
}

fn labels(pod: &Pod) -> BTreeMap<String, String> {
    pod.metadata.labels.clone().unwrap_or_default()
}

#[test]
fn seed_001_profile_mutates_the_spark_pod() {
    let profile_yaml: Value =
        serde_yaml::from_str(include_str!("../../tests/fixtures/seed001_profile.yaml")).unwrap();
    let spark: Pod = serde_yaml::from_str(include_str!("../../tests/fixtures/spark_pod.yaml")).unwrap();
    let view = view(vec![profile(profile_yaml)]);
    let result = mutate_pod(&spark, "spark", &view, MutationOptions::default(), &mut always()).unwrap();
    let pod = result.pod;
    let labels = labels(&pod);
    assert_eq!(labels["koordinator.sh/qosClass"], "BE");
    assert_eq!(labels["koordinator.sh/priority"], "1000");
    assert_eq!(labels["koordinator.sh/mutated"], "true");
    let annotations = pod.metadata.annotations.clone().unwrap();
    assert_eq!(annotations["koordinator.sh/intercepted"], "true");
    let spec = pod.spec.clone().unwrap();
    assert_eq!(spec.scheduler_name.as_deref(), Some("koord-scheduler"));
    assert_eq!(spec.priority_class_name.as_deref(), Some("koord-batch"));
    assert_eq!(spec.priority, Some(5000));
    assert_eq!(spec.preemption_policy.as_deref(), Some("PreemptLowerPriority"));
    assert_eq!(spec.termination_grace_period_seconds, Some(30));
    let resources = spec.containers[0].resources.clone().unwrap();
    let requests = resources.requests.unwrap();
    let limits = resources.limits.unwrap();
    assert_eq!(requests["kubernetes.io/batch-cpu"].0, "1000");
    assert_eq!(requests["kubernetes.io/batch-memory"].0, "2Gi");
    assert_eq!(limits["kubernetes.io/batch-cpu"].0, "2000");
    assert_eq!(limits["kubernetes.io/batch-memory"].0, "4Gi");
    assert!(!requests.contains_key("cpu") && !limits.contains_key("memory"));
    let init = spec.init_containers.unwrap()[0]
        .resources
        .clone()
        .unwrap()
        .requests
        .unwrap();
    assert_eq!(init["kubernetes.io/batch-cpu"].0, "250");
    assert_eq!(init["kubernetes.io/batch-memory"].0, "64Mi");
    let extended: Value =
        serde_json::from_str(&annotations["node.koordinator.sh/extended-resource-spec"]).unwrap();
    assert_eq!(
        extended,
        json!({"containers": {"spark-kubernetes-driver": {
            "requests": {"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "2Gi"},
            "limits": {"kubernetes.io/batch-cpu": "2000", "kubernetes.io/batch-memory": "4Gi"}
        }}})
    );
    assert_eq!(result.profiles.len(), 1);
    assert!(result.profiles[0].applied);
    // The patch, applied to the submitted pod, yields exactly the mutated pod.
    let mut patched = serde_json::to_value(&spark).unwrap();
    json_patch::patch(&mut patched, &result.patch).unwrap();
    assert_eq!(patched, serde_json::to_value(&pod).unwrap());
}

#[test]
fn seed_001_profile_skips_pods_outside_labelled_namespaces() {
    let profile_yaml: Value =
        serde_yaml::from_str(include_str!("../../tests/fixtures/seed001_profile.yaml")).unwrap();
    let mut spark: Pod = serde_yaml::from_str(include_str!("../../tests/fixtures/spark_pod.yaml")).unwrap();
    spark.metadata.namespace = Some("default".into());
    let result = mutate_pod(
        &spark,
        "default",
        &view(vec![profile(profile_yaml)]),
        MutationOptions::default(),
        &mut always(),
    )
    .unwrap();
    assert!(result.patch.0.is_empty());
    assert_eq!(
        result.profiles[0].reason,
        "spec.namespaceSelector does not match the Namespace labels"
    );
}

#[test]
fn seed_002_be_pod_gets_only_the_extended_resource_spec() {
    let be: Pod = serde_yaml::from_str(include_str!("../../tests/fixtures/seed002_be_pod.yaml")).unwrap();
    let result = mutate_pod(
        &be,
        "default",
        &view(vec![]),
        MutationOptions::default(),
        &mut always(),
    )
    .unwrap();
    assert_eq!(result.patch.0.len(), 1, "{:?}", result.patch);
    let annotation = &result.pod.metadata.annotations.unwrap()["node.koordinator.sh/extended-resource-spec"];
    let extended: Value = serde_json::from_str(annotation).unwrap();
    assert_eq!(
        extended["containers"]["stress"]["requests"],
        json!({"kubernetes.io/batch-cpu": "4k", "kubernetes.io/batch-memory": "4Gi"})
    );
}

#[test]
fn each_step_in_order() {
    let p = profile(json!({
        "metadata": {"name": "steps"},
        "spec": {
            "labels": {"new": "1", "team": "b"},
            "annotations": {"a1": "x"},
            "labelKeysMapping": {"app": "app-copy", "missing": "missing-copy"},
            "annotationKeysMapping": {"a1": "a2"},
            "labelSuffixes": {"app": "-suffixed", "absent": "-never"},
            "schedulerName": "koord-scheduler",
            "qosClass": "LS",
            "koordinatorPriority": 7,
        }
    }));
    let result = mutate_pod(
        &plain_pod(),
        "default",
        &view(vec![p]),
        MutationOptions::default(),
        &mut always(),
    )
    .unwrap();
    let labels = labels(&result.pod);
    assert_eq!(labels["new"], "1");
    assert_eq!(labels["team"], "b", "profile labels overwrite");
    assert_eq!(
        labels["app-copy"], "x",
        "mapping copies the value before suffixes"
    );
    assert_eq!(
        labels["missing-copy"], "",
        "a missing source maps to an empty value, as upstream"
    );
    assert_eq!(labels["app"], "x-suffixed");
    assert!(
        !labels.contains_key("absent"),
        "suffixes only apply to existing labels"
    );
    assert_eq!(labels["koordinator.sh/qosClass"], "LS");
    assert_eq!(labels["koordinator.sh/priority"], "7");
    let annotations = result.pod.metadata.annotations.unwrap();
    assert_eq!(annotations["a2"], "x");
    assert_eq!(
        result.pod.spec.as_ref().unwrap().scheduler_name.as_deref(),
        Some("koord-scheduler")
    );
    // LS without a priority class is Prod by default: resources stay.
    let requests = result.pod.spec.unwrap().containers[0]
        .resources
        .clone()
        .unwrap()
        .requests
        .unwrap();
    assert_eq!(requests["cpu"].0, "500m");
}

#[test]
fn profiles_apply_in_name_order_later_wins() {
    let b = profile(json!({"metadata": {"name": "b"}, "spec": {"labels": {"x": "from-b"}}}));
    let a = profile(json!({"metadata": {"name": "a"}, "spec": {"labels": {"x": "from-a"}}}));
    let result = mutate_pod(
        &plain_pod(),
        "default",
        &view(vec![b, a]),
        MutationOptions::default(),
        &mut always(),
    )
    .unwrap();
    assert_eq!(labels(&result.pod)["x"], "from-b");
    let names: Vec<_> = result.profiles.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["a", "b"]);
}

#[test]
fn invalid_selector_is_a_non_match_with_a_reason() {
    let bad = profile(json!({"metadata": {"name": "bad"}, "spec": {
        "selector": {"matchExpressions": [{"key": "app", "operator": "Near", "values": ["x"]}]},
        "labels": {"mutated": "yes"}
    }}));
    let result = mutate_pod(
        &plain_pod(),
        "default",
        &view(vec![bad]),
        MutationOptions::default(),
        &mut always(),
    )
    .unwrap();
    assert!(result.patch.0.is_empty());
    assert!(!result.profiles[0].applied);
    assert!(
        result.profiles[0].reason.starts_with("invalid spec.selector"),
        "{}",
        result.profiles[0].reason
    );
}

#[test]
fn unknown_namespace_does_not_match_a_namespace_selector() {
    let p = profile(json!({"metadata": {"name": "p"}, "spec": {
        "namespaceSelector": {"matchLabels": {"x": "y"}}, "labels": {"m": "1"}
    }}));
    let result = mutate_pod(
        &plain_pod(),
        "default",
        &StaticView {
            profiles: vec![p],
            ..StaticView::default()
        },
        MutationOptions::default(),
        &mut always(),
    )
    .unwrap();
    assert!(result.patch.0.is_empty());
    assert!(result.profiles[0].reason.contains("Namespace is unknown"));
}

#[test]
fn missing_priority_class_denies_with_a_clear_message() {
    let p = profile(json!({"metadata": {"name": "p"}, "spec": {"priorityClassName": "koord-nope"}}));
    let error = mutate_pod(
        &plain_pod(),
        "default",
        &view(vec![p]),
        MutationOptions::default(),
        &mut always(),
    )
    .unwrap_err();
    assert!(matches!(error, MutateError::MissingPriorityClass { .. }));
    assert_eq!(
        error.to_string(),
        "ClusterColocationProfile p: spec.priorityClassName: PriorityClass \"koord-nope\" does not exist; create it or fix the profile"
    );
}

#[test]
fn probability_is_exactly_p_percent() {
    // Upstream applies when !(rand.Intn(100) > p), i.e. for p+1 of the 100 draws.
    for percent in [0u32, 1, 30, 50, 99, 100] {
        let p = profile(
            json!({"metadata": {"name": "p"}, "spec": {"probability": percent, "labels": {"m": "1"}}}),
        );
        let view = view(vec![p]);
        let applied = (0..100u32)
            .filter(|draw| {
                let mut roll = || *draw;
                mutate_pod(
                    &plain_pod(),
                    "default",
                    &view,
                    MutationOptions::default(),
                    &mut roll,
                )
                .unwrap()
                .profiles[0]
                    .applied
            })
            .count();
        assert_eq!(applied as u32, percent, "probability {percent}");
    }
}

#[test]
fn probability_statistics_with_a_seeded_rng() {
    let p = profile(json!({"metadata": {"name": "p"}, "spec": {"probability": "30%", "labels": {"m": "1"}}}));
    let view = view(vec![p]);
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let mut roll = || rng.random_range(0..100u32);
    let pods = 10_000;
    let applied = (0..pods)
        .filter(|_| {
            mutate_pod(
                &plain_pod(),
                "default",
                &view,
                MutationOptions::default(),
                &mut roll,
            )
            .unwrap()
            .profiles[0]
                .applied
        })
        .count();
    let share = applied as f64 / pods as f64;
    assert!((share - 0.30).abs() < 0.02, "applied share {share}");
}

#[test]
fn batch_translation_covers_limits_only_init_and_overhead() {
    let p = profile(
        json!({"metadata": {"name": "p"}, "spec": {"qosClass": "BE", "priorityClassName": "koord-batch"}}),
    );
    let pod = pod(json!({
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {
            "overhead": {"cpu": "100m", "memory": "32Mi"},
            "initContainers": [{"name": "i", "resources": {"limits": {"cpu": "1.5", "memory": "1G"}}}],
            "containers": [{"name": "c", "resources": {"limits": {"cpu": "2"}, "requests": {"memory": "512Mi"}}}]
        }
    }));
    let result = mutate_pod(
        &pod,
        "default",
        &view(vec![p]),
        MutationOptions::default(),
        &mut always(),
    )
    .unwrap();
    let spec = result.pod.spec.unwrap();
    let overhead = spec.overhead.unwrap();
    assert_eq!(overhead["kubernetes.io/batch-cpu"].0, "100");
    assert_eq!(overhead["kubernetes.io/batch-memory"].0, "32Mi");
    let init = spec.init_containers.unwrap()[0].resources.clone().unwrap();
    assert_eq!(init.limits.unwrap()["kubernetes.io/batch-cpu"].0, "1500");
    let init_requests = init.requests.unwrap();
    assert_eq!(
        init_requests["kubernetes.io/batch-cpu"].0, "1500",
        "request = limit when only the limit is set"
    );
    assert_eq!(init_requests["kubernetes.io/batch-memory"].0, "1G");
    let container = spec.containers[0].resources.clone().unwrap();
    assert_eq!(container.requests.unwrap()["kubernetes.io/batch-cpu"].0, "2000");
}

#[test]
fn mid_priority_uses_mid_resources_and_free_is_untouched() {
    for (class, cpu_name) in [
        ("koord-mid", Some("kubernetes.io/mid-cpu")),
        ("koord-free", None),
        ("koord-prod", None),
    ] {
        let p = profile(json!({"metadata": {"name": "p"}, "spec": {"priorityClassName": class}}));
        let result = mutate_pod(
            &plain_pod(),
            "default",
            &view(vec![p]),
            MutationOptions::default(),
            &mut always(),
        )
        .unwrap();
        let requests = result.pod.spec.unwrap().containers[0]
            .resources
            .clone()
            .unwrap()
            .requests
            .unwrap();
        match cpu_name {
            Some(name) => assert_eq!(requests[name].0, "500", "{class}"),
            None => assert_eq!(requests["cpu"].0, "500m", "{class}"),
        }
    }
}

#[test]
fn skip_update_resources_annotation_and_switch() {
    let p = profile(
        json!({"metadata": {"name": "p", "annotations": {"config.koordinator.sh/skip-update-resources": "true"}},
        "spec": {"qosClass": "BE", "priorityClassName": "koord-batch"}}),
    );
    let result = mutate_pod(
        &plain_pod(),
        "default",
        &view(vec![p]),
        MutationOptions::default(),
        &mut always(),
    )
    .unwrap();
    let requests = result.pod.spec.unwrap().containers[0]
        .resources
        .clone()
        .unwrap()
        .requests
        .unwrap();
    assert_eq!(requests["cpu"].0, "500m");

    let p = profile(
        json!({"metadata": {"name": "p"}, "spec": {"qosClass": "BE", "priorityClassName": "koord-batch"}}),
    );
    let options = MutationOptions {
        skip_mutating_resources: true,
        ..MutationOptions::default()
    };
    let result = mutate_pod(&plain_pod(), "default", &view(vec![p]), options, &mut always()).unwrap();
    let requests = result.pod.spec.unwrap().containers[0]
        .resources
        .clone()
        .unwrap()
        .requests
        .unwrap();
    assert_eq!(requests["cpu"].0, "500m");
}

#[test]
fn be_qos_without_priority_class_still_translates() {
    let p = profile(json!({"metadata": {"name": "p"}, "spec": {"qosClass": "BE"}}));
    let result = mutate_pod(
        &plain_pod(),
        "default",
        &view(vec![p]),
        MutationOptions::default(),
        &mut always(),
    )
    .unwrap();
    let requests = result.pod.spec.unwrap().containers[0]
        .resources
        .clone()
        .unwrap()
        .requests
        .unwrap();
    assert_eq!(requests["kubernetes.io/batch-cpu"].0, "500");
}

#[test]
fn a_patch_that_breaks_the_pod_is_an_error() {
    let p = profile(json!({"metadata": {"name": "p"}, "spec": {"patch": {"spec": {"containers": "nope"}}}}));
    let error = mutate_pod(
        &plain_pod(),
        "default",
        &view(vec![p]),
        MutationOptions::default(),
        &mut always(),
    )
    .unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("ClusterColocationProfile p: spec.patch:"),
        "{error}"
    );
}

#[test]
fn no_profiles_no_batch_no_patch() {
    let result = mutate_pod(
        &plain_pod(),
        "default",
        &view(vec![]),
        MutationOptions::default(),
        &mut always(),
    )
    .unwrap();
    assert!(result.patch.0.is_empty());
}
