//! The node's pod cgroups as the hooks need them: which directory (and so which Kubernetes QoS
//! class) the runtime's pod sandbox stands for, and the CPUs a container's set must fit in there.

use std::sync::Arc;

use koord_api::KubeQoSClass;

use super::api;
use super::hooks::{PodCgroup, PodCgroups};
use crate::system::{
    CgroupDir, CgroupResource, CgroupValue, CgroupVersion, Cgroups, KubeCgroupPaths, PodUid,
};

/// [`PodCgroups`] on this node's cgroup tree.
#[derive(Debug, Clone)]
pub struct NodePodCgroups {
    cgroups: Arc<Cgroups>,
    paths: KubeCgroupPaths,
}

impl NodePodCgroups {
    /// Pod cgroups in `cgroups`, laid out as `paths` (the kubelet's driver).
    pub fn new(cgroups: Arc<Cgroups>, paths: KubeCgroupPaths) -> Self {
        NodePodCgroups { cgroups, paths }
    }
}

impl NodePodCgroups {
    /// The pod's directory and the QoS class it stands for, from the runtime's cgroup parent.
    fn pod_dir(&self, pod: &api::PodSandbox) -> Result<(KubeQoSClass, CgroupDir), String> {
        let uid = PodUid::new(&pod.uid).map_err(|e| e.to_string())?;
        let parent = pod.linux.as_ref().map_or("", |l| l.cgroup_parent.as_str());
        self.paths
            .pod_dir_of_parent(parent, &uid)
            .ok_or_else(|| format!("the runtime's cgroup parent {parent:?} is not pod {uid}'s directory"))
    }
}

impl PodCgroups for NodePodCgroups {
    fn pod_cgroup(&self, pod: &api::PodSandbox) -> Result<PodCgroup, String> {
        let (kube_qos, dir) = self.pod_dir(pod)?;
        let fits_in = match self.cgroups.version() {
            CgroupVersion::V2 => None,
            CgroupVersion::V1 => match self.cgroups.read(CgroupResource::CpusetCpus, &dir) {
                Ok(CgroupValue::Cpus(cpus)) => Some(cpus),
                Ok(other) => return Err(format!("{dir}: cpuset.cpus reads as {other:?}")),
                Err(e) => return Err(e.to_string()),
            },
        };
        Ok(PodCgroup { kube_qos, fits_in })
    }

    fn kube_qos(&self, pod: &api::PodSandbox) -> Result<KubeQoSClass, String> {
        self.pod_dir(pod).map(|(kube_qos, _)| kube_qos)
    }
}
