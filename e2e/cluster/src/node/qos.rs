//! Kubernetes QoS classes and the cgroup paths a kubelet with the cgroupfs driver creates.
//!
//! koordlet finds a pod's cgroup from its QoS class and UID alone, so the simulated node must place
//! every pod exactly where a kubelet would: `kubepods/pod<uid>` (Guaranteed),
//! `kubepods/burstable/pod<uid>`, `kubepods/besteffort/pod<uid>`, the container directory being
//! the hash after `containerd://`.

use k8s_openapi::api::core::v1::{Pod, PodSpec};
use koord_api::KubeQoSClass;

/// The kubelet's pod QoS class (`status.qosClass`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KubeQos {
    /// Every container has cpu and memory limits equal to its requests.
    Guaranteed,
    /// Some request or limit, but not Guaranteed.
    Burstable,
    /// No cpu or memory request or limit anywhere.
    BestEffort,
}

impl KubeQos {
    /// The string the API uses in `status.qosClass`.
    pub fn as_str(self) -> &'static str {
        match self {
            KubeQos::Guaranteed => "Guaranteed",
            KubeQos::Burstable => "Burstable",
            KubeQos::BestEffort => "BestEffort",
        }
    }

    /// Reads `status.qosClass`; `None` for anything else.
    pub fn from_status(text: &str) -> Option<Self> {
        match text {
            "Guaranteed" => Some(KubeQos::Guaranteed),
            "Burstable" => Some(KubeQos::Burstable),
            "BestEffort" => Some(KubeQos::BestEffort),
            _ => None,
        }
    }

    /// The QoS-level directory below the cgroup root (`kubepods`, `kubepods/burstable`, ...).
    pub fn qos_dir(self) -> &'static str {
        match self {
            KubeQos::Guaranteed => KUBEPODS_DIR,
            KubeQos::Burstable => "kubepods/burstable",
            KubeQos::BestEffort => "kubepods/besteffort",
        }
    }
}

/// The root of every pod cgroup (cgroupfs driver).
pub const KUBEPODS_DIR: &str = "kubepods";

/// The cgroup directories a node creates before any pod: root, then the two QoS levels.
pub const QOS_LEVEL_DIRS: [&str; 3] = [KUBEPODS_DIR, "kubepods/burstable", "kubepods/besteffort"];

/// The pod's cgroup directory relative to a controller root, as the cgroupfs driver names it.
pub fn pod_cgroup_dir(qos: KubeQos, pod_uid: &str) -> String {
    format!("{}/pod{pod_uid}", qos.qos_dir())
}

/// The container's cgroup directory: the pod directory plus the hash of `<runtime>://<hash>`.
pub fn container_cgroup_dir(qos: KubeQos, pod_uid: &str, container_id: &str) -> String {
    let hash = container_id.split_once("://").map_or(container_id, |(_, h)| h);
    format!("{}/{hash}", pod_cgroup_dir(qos, pod_uid))
}

impl From<KubeQoSClass> for KubeQos {
    fn from(class: KubeQoSClass) -> Self {
        match class {
            KubeQoSClass::Guaranteed => KubeQos::Guaranteed,
            KubeQoSClass::Burstable => KubeQos::Burstable,
            KubeQoSClass::BestEffort => KubeQos::BestEffort,
        }
    }
}

/// The pod's QoS class: `status.qosClass` when the API server or a kubelet already set it,
/// else computed from the spec as the kubelet does.
pub fn pod_qos(pod: &Pod) -> KubeQos {
    if let Some(qos) = pod
        .status
        .as_ref()
        .and_then(|s| s.qos_class.as_deref())
        .and_then(KubeQos::from_status)
    {
        return qos;
    }
    pod.spec.as_ref().map_or(KubeQos::BestEffort, compute_qos)
}

/// The Kubernetes QoS rule (one implementation, `koord_api`'s: only cpu and memory count, so a
/// pod with batch resources only is BestEffort). The spec is expected as the API server stores
/// it, with requests defaulted from limits.
pub fn compute_qos(spec: &PodSpec) -> KubeQos {
    koord_api::qos::compute_kube_qos_class(spec).into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn container(requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Container {
        let map = |pairs: &[(&str, &str)]| {
            (!pairs.is_empty()).then(|| {
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                    .collect()
            })
        };
        Container {
            name: "c".into(),
            resources: Some(ResourceRequirements {
                requests: map(requests),
                limits: map(limits),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn spec(containers: Vec<Container>) -> PodSpec {
        PodSpec {
            containers,
            ..Default::default()
        }
    }

    #[test]
    fn classifies_like_the_kubelet() {
        let cases: Vec<(&str, Vec<Container>, KubeQos)> = vec![
            ("nothing", vec![container(&[], &[])], KubeQos::BestEffort),
            (
                "batch resources only (seed 002)",
                vec![container(
                    &[("kubernetes.io/batch-cpu", "4k")],
                    &[("kubernetes.io/batch-cpu", "4k")],
                )],
                KubeQos::BestEffort,
            ),
            (
                "zero requests",
                vec![container(&[("cpu", "0")], &[])],
                KubeQos::BestEffort,
            ),
            (
                "equal limits",
                vec![container(
                    &[("cpu", "1"), ("memory", "1Gi")],
                    &[("cpu", "1"), ("memory", "1Gi")],
                )],
                KubeQos::Guaranteed,
            ),
            (
                "limits with requests defaulted by the API server",
                vec![container(
                    &[("cpu", "1"), ("memory", "1Gi")],
                    &[("cpu", "1"), ("memory", "1Gi")],
                )],
                KubeQos::Guaranteed,
            ),
            (
                "1000m equals 1",
                vec![container(
                    &[("cpu", "1000m"), ("memory", "1Gi")],
                    &[("cpu", "1"), ("memory", "1024Mi")],
                )],
                KubeQos::Guaranteed,
            ),
            (
                "request below limit",
                vec![container(
                    &[("cpu", "500m"), ("memory", "1Gi")],
                    &[("cpu", "1"), ("memory", "1Gi")],
                )],
                KubeQos::Burstable,
            ),
            (
                "cpu only",
                vec![container(&[("cpu", "1")], &[("cpu", "1")])],
                KubeQos::Burstable,
            ),
            (
                "one container without limits",
                vec![
                    container(
                        &[("cpu", "1"), ("memory", "1Gi")],
                        &[("cpu", "1"), ("memory", "1Gi")],
                    ),
                    container(&[], &[]),
                ],
                KubeQos::Burstable,
            ),
        ];
        for (name, containers, want) in cases {
            assert_eq!(compute_qos(&spec(containers)), want, "{name}");
        }
    }

    #[test]
    fn status_wins() {
        let mut pod = Pod {
            spec: Some(spec(vec![container(&[("cpu", "1")], &[])])),
            ..Default::default()
        };
        assert_eq!(pod_qos(&pod), KubeQos::Burstable);
        pod.status = Some(k8s_openapi::api::core::v1::PodStatus {
            qos_class: Some("BestEffort".into()),
            ..Default::default()
        });
        assert_eq!(pod_qos(&pod), KubeQos::BestEffort);
    }

    #[test]
    fn paths_follow_the_cgroupfs_driver() {
        let uid = "6f1c-22";
        assert_eq!(pod_cgroup_dir(KubeQos::Guaranteed, uid), "kubepods/pod6f1c-22");
        assert_eq!(
            pod_cgroup_dir(KubeQos::Burstable, uid),
            "kubepods/burstable/pod6f1c-22"
        );
        assert_eq!(
            container_cgroup_dir(KubeQos::BestEffort, uid, "containerd://abc"),
            "kubepods/besteffort/pod6f1c-22/abc"
        );
        assert_eq!(
            container_cgroup_dir(KubeQos::BestEffort, uid, "abc"),
            "kubepods/besteffort/pod6f1c-22/abc"
        );
    }
}
