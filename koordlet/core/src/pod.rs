//! The facts about one pod every koordlet part needs, resolved once per snapshot through
//! `koord_api` (QoS, priority, Kubernetes QoS) so collectors, reporter and strategies agree.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use koord_api::{KubeQoSClass, PriorityClass, QoSClass, priority, qos};

use crate::CgroupDir;
use crate::{ContainerId, KubeCgroupPaths, PodUid};

/// One running container of a pod with the cgroup-safe ID its status reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerMeta {
    /// `spec.containers[].name`.
    pub name: String,
    /// `status.containerStatuses[].containerID`, parsed; None until the runtime created it.
    pub id: Option<ContainerId>,
}

/// A pod and its resolved classes. Cheap to clone (the pod is shared).
#[derive(Debug, Clone)]
pub struct PodMeta {
    /// The pod as the source returned it.
    pub pod: Arc<Pod>,
    /// `metadata.uid`, validated for use in a path.
    pub uid: PodUid,
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// Koordinator QoS (label, else from the Kubernetes QoS).
    pub qos: QoSClass,
    /// Koordinator QoS from the label only (BatchResource acts on labelled BE pods only).
    pub qos_label: QoSClass,
    /// Koordinator priority class (from `spec.priority`, else from the QoS).
    pub priority: PriorityClass,
    /// The Kubernetes QoS class: decides the pod's cgroup parent.
    pub kube_qos: KubeQoSClass,
    /// Containers with their IDs.
    pub containers: Vec<ContainerMeta>,
}

/// Why a pod cannot be used by the node agent (logged, the pod is left out).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PodMetaError {
    /// The UID is missing or not path-safe.
    #[error("pod {namespace}/{name}: bad or missing metadata.uid: {reason}")]
    BadUid {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// Why.
        reason: String,
    },
}

impl PodMeta {
    /// Resolves a pod. Container IDs that do not parse are treated as "not created yet".
    pub fn new(pod: Arc<Pod>) -> Result<Self, PodMetaError> {
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let uid =
            PodUid::new(pod.metadata.uid.as_deref().unwrap_or("")).map_err(|e| PodMetaError::BadUid {
                namespace: namespace.clone(),
                name: name.clone(),
                reason: e.to_string(),
            })?;
        let kube_qos = match qos::kube_qos_class(&pod) {
            Some(k) => k,
            None => KubeQoSClass::BestEffort,
        };
        let statuses = pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_deref())
            .unwrap_or(&[]);
        let containers = pod
            .spec
            .as_ref()
            .map(|spec| {
                spec.containers
                    .iter()
                    .map(|c| ContainerMeta {
                        name: c.name.clone(),
                        id: statuses
                            .iter()
                            .find(|s| s.name == c.name)
                            .and_then(|s| s.container_id.as_deref())
                            .and_then(|id| ContainerId::parse(id).ok()),
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(PodMeta {
            qos: qos::qos_class_with_default(&pod),
            qos_label: qos::qos_class_raw(&pod),
            priority: priority::priority_class_with_default(&pod),
            uid,
            namespace,
            name,
            kube_qos,
            containers,
            pod,
        })
    }

    /// The pod's cgroup directory (relative to a controller root).
    pub fn cgroup_dir(&self, paths: &KubeCgroupPaths) -> CgroupDir {
        paths.pod_dir(self.kube_qos, &self.uid)
    }

    /// The container's cgroup directory, if its ID is known.
    pub fn container_dir(&self, paths: &KubeCgroupPaths, container: &ContainerMeta) -> Option<CgroupDir> {
        container
            .id
            .as_ref()
            .map(|id| paths.container_dir(self.kube_qos, &self.uid, id))
    }

    /// Whether the pod still runs (not Succeeded/Failed): finished pods have no cgroups.
    pub fn is_running(&self) -> bool {
        !matches!(
            self.pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded") | Some("Failed")
        )
    }

    /// Labelled `koordinator.sh/eviction-enabled=true`: the node-level evictions (`MemoryEvict`)
    /// may pick the pod whatever its QoS class.
    pub fn eviction_enabled(&self) -> bool {
        self.pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(koord_api::names::LABEL_EVICTION_ENABLED))
            .is_some_and(|v| v == "true")
    }

    /// The containers of the pod's spec (none when the spec is missing): requests and limits
    /// live there, the runtime's container IDs in [`PodMeta::containers`].
    pub fn spec_containers(&self) -> &[k8s_openapi::api::core::v1::Container] {
        self.pod
            .spec
            .as_ref()
            .map(|s| s.containers.as_slice())
            .unwrap_or(&[])
    }
}
