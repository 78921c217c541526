use super::*;
use k8s_openapi::api::core::v1::PodStatus;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

fn list(entries: &[(&str, &str)]) -> Option<ResourceList> {
    if entries.is_empty() {
        return None;
    }
    Some(
        entries
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
            .collect(),
    )
}

fn container(requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Container {
    Container {
        name: "c".into(),
        resources: Some(ResourceRequirements {
            requests: list(requests),
            limits: list(limits),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn spec(containers: Vec<Container>, init: Vec<Container>) -> PodSpec {
    PodSpec {
        containers,
        init_containers: if init.is_empty() { None } else { Some(init) },
        ..Default::default()
    }
}

const GUARANTEED_1: &[(&str, &str)] = &[("cpu", "1"), ("memory", "1Gi")];

#[test]
fn kube_qos_computed_like_the_kubelet() {
    use KubeQoSClass::*;
    let cases: Vec<(&str, PodSpec, KubeQoSClass)> = vec![
        ("no containers", spec(vec![], vec![]), BestEffort),
        (
            "no resources",
            spec(vec![container(&[], &[])], vec![]),
            BestEffort,
        ),
        (
            "only extended resources",
            spec(
                vec![container(
                    &[("kubernetes.io/batch-cpu", "4k")],
                    &[("kubernetes.io/batch-cpu", "4k")],
                )],
                vec![],
            ),
            BestEffort,
        ),
        (
            "zero requests do not count",
            spec(vec![container(&[("cpu", "0"), ("memory", "0")], &[])], vec![]),
            BestEffort,
        ),
        (
            "equal requests and limits",
            spec(vec![container(GUARANTEED_1, GUARANTEED_1)], vec![]),
            Guaranteed,
        ),
        (
            "equal in different notation",
            spec(
                vec![container(
                    &[("cpu", "1000m"), ("memory", "1073741824")],
                    GUARANTEED_1,
                )],
                vec![],
            ),
            Guaranteed,
        ),
        (
            "limits only (not defaulted)",
            spec(vec![container(&[], GUARANTEED_1)], vec![]),
            Burstable,
        ),
        (
            "request below limit",
            spec(
                vec![container(&[("cpu", "500m"), ("memory", "1Gi")], GUARANTEED_1)],
                vec![],
            ),
            Burstable,
        ),
        (
            "cpu only",
            spec(vec![container(&[("cpu", "1")], &[("cpu", "1")])], vec![]),
            Burstable,
        ),
        (
            "memory request only",
            spec(vec![container(&[("memory", "1Gi")], &[])], vec![]),
            Burstable,
        ),
        (
            "one container without limits",
            spec(
                vec![container(GUARANTEED_1, GUARANTEED_1), container(&[], &[])],
                vec![],
            ),
            Burstable,
        ),
        (
            "two guaranteed containers",
            spec(
                vec![
                    container(GUARANTEED_1, GUARANTEED_1),
                    container(&[("cpu", "2"), ("memory", "1")], &[("cpu", "2"), ("memory", "1")]),
                ],
                vec![],
            ),
            Guaranteed,
        ),
        (
            "init container without limits",
            spec(
                vec![container(GUARANTEED_1, GUARANTEED_1)],
                vec![container(&[("cpu", "1")], &[])],
            ),
            Burstable,
        ),
        (
            "init container resources alone",
            spec(
                vec![container(&[], &[])],
                vec![container(&[("memory", "1")], &[])],
            ),
            Burstable,
        ),
        (
            "unparsable quantities count as absent",
            spec(vec![container(&[("cpu", "lots")], &[])], vec![]),
            BestEffort,
        ),
    ];
    for (name, spec, expected) in cases {
        assert_eq!(compute_kube_qos_class(&spec), expected, "{name}");
    }
}

#[test]
fn pod_level_resources_replace_containers() {
    let mut s = spec(vec![container(&[], &[])], vec![]);
    s.resources = Some(ResourceRequirements {
        requests: list(GUARANTEED_1),
        limits: list(GUARANTEED_1),
        ..Default::default()
    });
    assert_eq!(compute_kube_qos_class(&s), KubeQoSClass::Guaranteed);
    s.resources = Some(ResourceRequirements {
        requests: list(GUARANTEED_1),
        ..Default::default()
    });
    assert_eq!(compute_kube_qos_class(&s), KubeQoSClass::Burstable);
    s.resources = Some(ResourceRequirements {
        limits: list(&[("cpu", "1")]),
        requests: list(&[("cpu", "1")]),
        ..Default::default()
    });
    assert_eq!(compute_kube_qos_class(&s), KubeQoSClass::Burstable);
}

fn pod(label: Option<&str>, status_qos: Option<&str>, spec: Option<PodSpec>) -> Pod {
    let mut pod = Pod::default();
    if let Some(label) = label {
        pod.metadata.labels = Some([(LABEL_QOS_CLASS.to_owned(), label.to_owned())].into());
    }
    pod.status = status_qos.map(|q| PodStatus {
        qos_class: Some(q.into()),
        ..Default::default()
    });
    pod.spec = spec;
    pod
}

#[test]
fn raw_qos_reads_the_label_only() {
    for class in QoSClass::NAMED {
        assert_eq!(
            qos_class_raw(&pod(Some(class.name()), Some("Guaranteed"), None)),
            class
        );
        assert_eq!(QoSClass::from_name(&class.to_string()), class);
    }
    assert_eq!(qos_class_raw(&pod(Some("be"), None, None)), QoSClass::None);
    assert_eq!(qos_class_raw(&pod(Some(""), None, None)), QoSClass::None);
    assert_eq!(
        qos_class_raw(&pod(None, Some("BestEffort"), None)),
        QoSClass::None
    );
}

#[test]
fn qos_with_default_falls_back_to_kube_qos() {
    let guaranteed = spec(vec![container(GUARANTEED_1, GUARANTEED_1)], vec![]);
    let cases: Vec<(&str, Pod, QoSClass)> = vec![
        (
            "label wins",
            pod(Some("BE"), Some("Guaranteed"), Some(guaranteed.clone())),
            QoSClass::Be,
        ),
        (
            "unknown label falls back",
            pod(Some("gold"), Some("Burstable"), None),
            QoSClass::Ls,
        ),
        (
            "status Guaranteed",
            pod(None, Some("Guaranteed"), None),
            QoSClass::Lsr,
        ),
        (
            "status Burstable",
            pod(None, Some("Burstable"), None),
            QoSClass::Ls,
        ),
        (
            "status BestEffort beats a guaranteed spec",
            pod(None, Some("BestEffort"), Some(guaranteed.clone())),
            QoSClass::Be,
        ),
        (
            "unknown status",
            pod(None, Some("Platinum"), Some(guaranteed.clone())),
            QoSClass::None,
        ),
        (
            "empty status is computed",
            pod(None, Some(""), Some(guaranteed.clone())),
            QoSClass::Lsr,
        ),
        (
            "no status, computed Guaranteed",
            pod(None, None, Some(guaranteed)),
            QoSClass::Lsr,
        ),
        ("no status, no spec", pod(None, None, None), QoSClass::Be),
    ];
    for (name, pod, expected) in cases {
        assert_eq!(qos_class_with_default(&pod), expected, "{name}");
    }
}

#[test]
fn kube_qos_names_round_trip() {
    for class in [
        KubeQoSClass::Guaranteed,
        KubeQoSClass::Burstable,
        KubeQoSClass::BestEffort,
    ] {
        assert_eq!(KubeQoSClass::from_name(class.name()), Some(class));
    }
    assert_eq!(KubeQoSClass::from_name("guaranteed"), None);
}
