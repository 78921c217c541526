//! Kubernetes QoS classes and the cgroup paths a kubelet with the cgroupfs driver creates.
//!
//! koordlet finds a pod's cgroup from its QoS class and UID alone, so the simulated node must place
//! every pod exactly where a kubelet would: `kubepods/pod<uid>` (Guaranteed),
//! `kubepods/burstable/pod<uid>`, `kubepods/besteffort/pod<uid>`, the container directory being
//! the hash after `containerd://`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};

use super::quantity::{QuantityError, parse_milli};

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

/// The pod's QoS class: `status.qosClass` when the API server or a kubelet already set it,
/// else computed from the spec as the kubelet does.
pub fn pod_qos(pod: &Pod) -> Result<KubeQos, QuantityError> {
    if let Some(qos) = pod
        .status
        .as_ref()
        .and_then(|s| s.qos_class.as_deref())
        .and_then(KubeQos::from_status)
    {
        return Ok(qos);
    }
    match &pod.spec {
        Some(spec) => compute_qos(spec),
        None => Ok(KubeQos::BestEffort),
    }
}

/// The kubelet's `GetPodQOS` over regular and init containers, counting only positive cpu and
/// memory quantities. A limit without a request counts as a request of the same size, which is
/// what the API server's defaulting would have written.
pub fn compute_qos(spec: &PodSpec) -> Result<KubeQos, QuantityError> {
    let containers = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten());
    let mut requests: BTreeMap<&str, i128> = BTreeMap::new();
    let mut limits: BTreeMap<&str, i128> = BTreeMap::new();
    let mut guaranteed = true;
    for container in containers {
        let (container_requests, container_limits) = qos_quantities(container)?;
        for (name, value) in &container_requests {
            *requests.entry(name).or_default() += value;
        }
        for (name, value) in &container_limits {
            *limits.entry(name).or_default() += value;
        }
        if !(container_limits.contains_key("cpu") && container_limits.contains_key("memory")) {
            guaranteed = false;
        }
    }
    if requests.is_empty() && limits.is_empty() {
        return Ok(KubeQos::BestEffort);
    }
    if guaranteed
        && requests.len() == limits.len()
        && requests.iter().all(|(name, req)| limits.get(name) == Some(req))
    {
        return Ok(KubeQos::Guaranteed);
    }
    Ok(KubeQos::Burstable)
}

type Quantities = BTreeMap<&'static str, i128>;

/// One container's positive cpu/memory requests (defaulted from limits) and limits.
fn qos_quantities(container: &Container) -> Result<(Quantities, Quantities), QuantityError> {
    let mut requests = Quantities::new();
    let mut limits = Quantities::new();
    let Some(resources) = &container.resources else {
        return Ok((requests, limits));
    };
    for name in ["cpu", "memory"] {
        let limit = match resources.limits.as_ref().and_then(|l| l.get(name)) {
            Some(q) => Some(parse_milli(&q.0)?),
            None => None,
        };
        let request = match resources.requests.as_ref().and_then(|r| r.get(name)) {
            Some(q) => Some(parse_milli(&q.0)?),
            None => limit,
        };
        if let Some(value) = request.filter(|v| *v > 0) {
            requests.insert(name, value);
        }
        if let Some(value) = limit.filter(|v| *v > 0) {
            limits.insert(name, value);
        }
    }
    Ok((requests, limits))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ResourceRequirements;
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
                "limits only defaults requests",
                vec![container(&[], &[("cpu", "1"), ("memory", "1Gi")])],
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
                    container(&[], &[("cpu", "1"), ("memory", "1Gi")]),
                    container(&[], &[]),
                ],
                KubeQos::Burstable,
            ),
        ];
        for (name, containers, want) in cases {
            assert_eq!(compute_qos(&spec(containers)), Ok(want), "{name}");
        }
    }

    #[test]
    fn status_wins_and_bad_quantities_are_errors() {
        let mut pod = Pod {
            spec: Some(spec(vec![container(&[("cpu", "1")], &[])])),
            ..Default::default()
        };
        assert_eq!(pod_qos(&pod), Ok(KubeQos::Burstable));
        pod.status = Some(k8s_openapi::api::core::v1::PodStatus {
            qos_class: Some("BestEffort".into()),
            ..Default::default()
        });
        assert_eq!(pod_qos(&pod), Ok(KubeQos::BestEffort));
        assert!(compute_qos(&spec(vec![container(&[("cpu", "lots")], &[])])).is_err());
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
