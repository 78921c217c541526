//! The hooks' decisions: a pod sandbox and container (as the runtime describes them) in, the
//! container's resources out. Pure apart from reading the current settings, the last round's
//! CPU pools and (for the cpuset) the pod cgroup's current CPUs.
//!
//! BatchResource: a container of a pod labelled `koordinator.sh/qosClass: BE` gets the CPU
//! shares, CFS quota and memory limit of its batch resources, from
//! [`be_limits::container_values`], the function the reconcile loop uses. The runtime does not
//! see extended resources, so the batch amounts come from the pod annotation
//! `node.koordinator.sh/extended-resource-spec` that koord-webhook writes (as upstream). A BE
//! pod without that annotation is left to the reconcile loop.
//!
//! Cpuset (CPU set policies): a container being created gets the CPUs the next QoS round would
//! give it ([`RuntimeCpusets::container`], the round's own decision): the CPUs the scheduler
//! bound an LSE/LSR pod to (`scheduling.koordinator.sh/resource-status`, gate
//! `CPUSetAllocator`), its allocation, the BE pool when cpu_suppress does not own BE cpusets,
//! or the shared pool. An `exclusive`/`share` container without an allocation yet, and every
//! container while the kubelet's static CPU manager owns cpusets, is left to the round. On
//! cgroup v1 a set that does not fit in the pod cgroup's current CPUs would make the runtime
//! fail the container, so it is left to the round too (which widens parents first).
//!
//! RdtResctrl: a container being created gets the resctrl class of its pod's group
//! ([`super::rdt`]). Only at creation: the runtime cannot move a running container to another
//! class (containerd 1.7 drops `rdt_class` from updates), so Synchronize and UpdateContainer
//! never set it and running containers stay the resctrl round's.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::{Container as KubeContainer, ResourceRequirements};
use koord_api::KubeQoSClass;
use koord_api::QoSClass;
use koord_api::names::ANNOTATION_RESOURCE_STATUS;
use koord_api::names::{ANNOTATION_EXTENDED_RESOURCE_SPEC, LABEL_QOS_CLASS};
use koord_api::quantity::ResourceList;
use koord_api::resources::container_amounts;
use koordlet_core::resctrl::ResctrlGroup;
use koordlet_core::strategies::CFS_PERIOD_US;
use koordlet_core::strategies::be_limits::{self, BeContainerLimits, BeLimitsSettings};
use koordlet_core::strategies::cpuset::CpuList;
use koordlet_core::strategies::cpuset_policy::{
    ANNOTATION_CPUSET_POLICY, ANNOTATION_CRANE_CPU_MANAGER, CpusetPolicy, RuntimeCpusets, RuntimePod,
    resource_status_cpus,
};
use koordlet_core::strategies::resctrl::ResctrlClasses;
use serde::Deserialize;
use tracing::{debug, info, warn};

use super::api;
use super::rdt::{RdtAvailability, rdt_class};
use super::session::NriHandler;

/// What the hooks decide with; the agent refreshes it from the gates and the NodeSLO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HookSettings {
    /// Feature gate `BatchResource`.
    pub batch_resource: bool,
    /// be_limits' settings (the same as the reconcile loop's).
    pub be_limits: BeLimitsSettings,
    /// Container cpusets are koordlet's (the kubelet's CPU manager is not `static`).
    pub cpusets: bool,
    /// Feature gate `CPUSetAllocator`: LSE/LSR pods get the CPUs the scheduler bound them to.
    pub cpuset_allocator: bool,
    /// The classes with resctrl enabled in the NodeSLO (none without a NodeSLO, as the round).
    pub resctrl: ResctrlClasses,
}

impl Default for HookSettings {
    fn default() -> Self {
        HookSettings {
            batch_resource: true,
            be_limits: BeLimitsSettings::default(),
            cpusets: true,
            cpuset_allocator: true,
            resctrl: ResctrlClasses::default(),
        }
    }
}

/// A pod's cgroup as the node has it, for the cpuset hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodCgroup {
    /// The kube QoS class its directory stands for.
    pub kube_qos: KubeQoSClass,
    /// The CPUs a container's set must fit in (cgroup v1: the pod cgroup's `cpuset.cpus`);
    /// `None` where the kernel imposes no such rule (v2).
    pub fits_in: Option<CpuList>,
}

/// Finds a pod's cgroup from the runtime's description of the pod sandbox.
pub trait PodCgroups: Send + Sync {
    /// The pod's cgroup, or why it cannot be used.
    fn pod_cgroup(&self, pod: &api::PodSandbox) -> Result<PodCgroup, String>;

    /// The Kubernetes QoS class the pod's cgroup stands for (resolves the class of a pod
    /// without the `koordinator.sh/qosClass` label, as the round does from the pod's status).
    fn kube_qos(&self, pod: &api::PodSandbox) -> Result<KubeQoSClass, String> {
        self.pod_cgroup(pod).map(|c| c.kube_qos)
    }
}

/// Why a container is left to the reconcile loop.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HookError {
    /// The annotation is not the JSON koord-webhook writes.
    #[error("pod {pod}: annotation {ANNOTATION_EXTENDED_RESOURCE_SPEC}: {reason}")]
    BadSpec {
        /// `namespace/name`.
        pod: String,
        /// Why.
        reason: String,
    },
}

#[derive(Deserialize)]
struct ExtendedResourceSpec {
    #[serde(default)]
    containers: BTreeMap<String, ContainerSpec>,
}

#[derive(Deserialize)]
struct ContainerSpec {
    #[serde(default)]
    requests: ResourceList,
    #[serde(default)]
    limits: ResourceList,
}

/// The BE limits of `container` in `pod`: `Ok(None)` when the hooks do not apply (not a BE
/// pod, gate off, no annotation).
pub fn be_container_limits(
    pod: &api::PodSandbox,
    container_name: &str,
    settings: &HookSettings,
) -> Result<Option<BeContainerLimits>, HookError> {
    if !settings.batch_resource
        || pod.labels.get(LABEL_QOS_CLASS).map(|l| QoSClass::from_name(l)) != Some(QoSClass::Be)
    {
        return Ok(None);
    }
    let Some(text) = pod.annotations.get(ANNOTATION_EXTENDED_RESOURCE_SPEC) else {
        return Ok(None);
    };
    let bad = |reason: String| HookError::BadSpec {
        pod: format!("{}/{}", pod.namespace, pod.name),
        reason,
    };
    let mut spec: ExtendedResourceSpec = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
    // A container missing from the spec has no batch resources (2 shares, no limits), as in
    // the reconcile loop.
    let (requests, limits) = spec
        .containers
        .remove(container_name)
        .map(|c| (c.requests, c.limits))
        .unwrap_or_default();
    let kube = KubeContainer {
        name: container_name.to_string(),
        resources: Some(ResourceRequirements {
            requests: Some(requests),
            limits: Some(limits),
            ..ResourceRequirements::default()
        }),
        ..KubeContainer::default()
    };
    let amounts = container_amounts(&kube).map_err(|e| bad(e.to_string()))?;
    Ok(Some(be_limits::container_values(&amounts, settings.be_limits)))
}

/// The limits as runtime resources (shares, quota with the 100 ms period, memory limit).
pub fn linux_resources(limits: &BeContainerLimits) -> api::LinuxResources {
    api::LinuxResources {
        cpu: Some(api::LinuxCpu {
            shares: Some(api::OptionalUInt64 {
                value: limits.cpu_shares.max(2) as u64,
            }),
            quota: Some(api::OptionalInt64 {
                value: limits.cfs_quota_us,
            }),
            period: Some(api::OptionalUInt64 {
                value: CFS_PERIOD_US as u64,
            }),
            ..api::LinuxCpu::default()
        }),
        memory: Some(api::LinuxMemory {
            limit: Some(api::OptionalInt64 {
                value: limits.memory_limit_bytes,
            }),
        }),
        rdt_class: None,
    }
}

/// Whether `current` already has the decided values (an unset quota or memory limit counts as
/// unlimited, as the kernel sees it).
pub fn already_applied(current: Option<&api::LinuxResources>, limits: &BeContainerLimits) -> bool {
    let Some(current) = current else {
        return false;
    };
    let cpu = current.cpu.as_ref();
    let shares = cpu.and_then(|c| c.shares).map(|s| s.value as i64);
    let quota = cpu
        .and_then(|c| c.quota)
        .map_or(-1, |q| if q.value <= 0 { -1 } else { q.value });
    let memory = current
        .memory
        .as_ref()
        .and_then(|m| m.limit)
        .map_or(-1, |l| if l.value <= 0 { -1 } else { l.value });
    shares == Some(limits.cpu_shares.max(2))
        && quota == limits.cfs_quota_us
        && memory == limits.memory_limit_bytes
}

/// The hooks koordlet answers the runtime with.
#[derive(Clone, Default)]
pub struct RuntimeHooks {
    settings: Arc<RwLock<HookSettings>>,
    /// The last QoS round's CPU pools (`None`: CPU set policies idle on this node).
    cpusets: Arc<RwLock<Option<Arc<RuntimeCpusets>>>>,
    /// The node's pod cgroups (`None`: no cpuset hook; tests of the other hooks).
    pod_cgroups: Option<Arc<dyn PodCgroups>>,
    /// resctrl as the agent found it at start (gate off unless told).
    rdt: RdtAvailability,
}

impl std::fmt::Debug for RuntimeHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeHooks")
            .field("settings", &self.settings())
            .field("cpusets", &self.runtime_cpusets())
            .field("pod_cgroups", &self.pod_cgroups.is_some())
            .field("rdt", &self.rdt)
            .finish()
    }
}

impl RuntimeHooks {
    /// Hooks deciding with `settings`.
    pub fn new(settings: HookSettings) -> Self {
        RuntimeHooks {
            settings: Arc::new(RwLock::new(settings)),
            ..RuntimeHooks::default()
        }
    }

    /// Lets the hooks set cpusets, looking pods' cgroups up through `pod_cgroups`.
    pub fn with_pod_cgroups(mut self, pod_cgroups: Arc<dyn PodCgroups>) -> Self {
        self.pod_cgroups = Some(pod_cgroups);
        self
    }

    /// Lets the hooks name resctrl classes as `rdt` allows (the agent passes what the resctrl
    /// round found at start).
    pub fn with_rdt(mut self, rdt: RdtAvailability) -> Self {
        self.rdt = rdt;
        self
    }

    /// Replaces the settings (the agent calls this when the gates or the NodeSLO change).
    pub fn set_settings(&self, settings: HookSettings) {
        *self.settings.write().unwrap_or_else(|p| p.into_inner()) = settings;
    }

    /// Replaces the CPU pools (the agent calls this after every QoS round).
    pub fn set_runtime_cpusets(&self, cpusets: Option<Arc<RuntimeCpusets>>) {
        *self.cpusets.write().unwrap_or_else(|p| p.into_inner()) = cpusets;
    }

    fn settings(&self) -> HookSettings {
        *self.settings.read().unwrap_or_else(|p| p.into_inner())
    }

    fn runtime_cpusets(&self) -> Option<Arc<RuntimeCpusets>> {
        self.cpusets.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The cpuset of `container` being created in `pod`, when koordlet decides one now.
    pub fn container_cpus(&self, pod: &api::PodSandbox, container: &api::Container) -> Option<CpuList> {
        let settings = self.settings();
        let pod_cgroups = self.pod_cgroups.as_ref()?;
        if !settings.cpusets {
            return None;
        }
        let qos = pod.labels.get(LABEL_QOS_CLASS).map(|l| QoSClass::from_name(l));
        let bound = (settings.cpuset_allocator && matches!(qos, Some(QoSClass::Lse | QoSClass::Lsr)))
            .then(|| pod.annotations.get(ANNOTATION_RESOURCE_STATUS))
            .flatten()
            .and_then(|text| resource_status_cpus(text));
        let view = self.runtime_cpusets();
        if bound.is_none() && view.is_none() {
            // CPU set policies idle: the round writes no cpuset either.
            return None;
        }
        let leave = |reason: &str| {
            info!(pod = %format!("{}/{}", pod.namespace, pod.name), container = %container.name,
                  reason, "NRI: cpuset left to the QoS round");
            None
        };
        let cgroup = match pod_cgroups.pod_cgroup(pod) {
            Ok(cgroup) => cgroup,
            Err(e) => return leave(&e),
        };
        let policy = match pod
            .annotations
            .get(ANNOTATION_CPUSET_POLICY)
            .or_else(|| pod.annotations.get(ANNOTATION_CRANE_CPU_MANAGER))
            .map(|text| CpusetPolicy::parse(text))
        {
            None => None,
            Some(Ok(policy)) => Some(policy),
            Some(Err(e)) => return leave(&e.to_string()),
        };
        let runtime_pod = RuntimePod {
            uid: &pod.uid,
            be: qos == Some(QoSClass::Be) || cgroup.kube_qos == KubeQoSClass::BestEffort,
            bound: bound.as_ref(),
            policy,
        };
        let cpus = match &view {
            Some(view) => view.container(&runtime_pod, &container.name)?,
            None => bound?,
        };
        match &cgroup.fits_in {
            Some(parent) if !cpus.is_subset(parent) => leave(&format!(
                "CPUs {cpus} do not fit in the pod cgroup's {parent} (cgroup v1)"
            )),
            _ => Some(cpus),
        }
    }

    /// The resctrl class of `container` being created in `pod`, when koordlet sets one now;
    /// why not is logged at debug.
    pub fn container_rdt_class(
        &self,
        pod: &api::PodSandbox,
        container: &api::Container,
    ) -> Option<ResctrlGroup> {
        let label = pod
            .labels
            .get(LABEL_QOS_CLASS)
            .map_or(QoSClass::None, |l| QoSClass::from_name(l));
        let qos = || {
            let mut why = String::new();
            let qos = label.or_kube_qos(|| match &self.pod_cgroups {
                Some(cgroups) => cgroups.kube_qos(pod).map_err(|e| why = e).ok(),
                None => {
                    why = "no koordinator.sh/qosClass label and no pod cgroup lookup".into();
                    None
                }
            });
            if qos == QoSClass::None { Err(why) } else { Ok(qos) }
        };
        match rdt_class(&self.rdt, self.settings().resctrl, qos) {
            Ok(group) => Some(group),
            Err(reason) => {
                debug!(pod = %format!("{}/{}", pod.namespace, pod.name), container = %container.name,
                       %reason, "NRI: no resctrl class at creation; left to the resctrl round");
                None
            }
        }
    }

    fn limits(&self, pod: &api::PodSandbox, container: &api::Container) -> Option<BeContainerLimits> {
        match be_container_limits(pod, &container.name, &self.settings()) {
            Ok(limits) => limits,
            Err(e) => {
                warn!(error = %e, container = %container.name, "NRI: container left to the reconcile loop");
                None
            }
        }
    }

    fn update(container_id: &str, limits: &BeContainerLimits) -> api::ContainerUpdate {
        api::ContainerUpdate {
            container_id: container_id.to_string(),
            linux: Some(api::LinuxContainerUpdate {
                resources: Some(linux_resources(limits)),
            }),
            // A failed update must not fail the runtime's operation; the reconcile loop retries.
            ignore_failure: true,
        }
    }
}

impl NriHandler for RuntimeHooks {
    fn synchronize(
        &self,
        pods: &[api::PodSandbox],
        containers: &[api::Container],
    ) -> Vec<api::ContainerUpdate> {
        let by_id: HashMap<&str, &api::PodSandbox> = pods.iter().map(|p| (p.id.as_str(), p)).collect();
        containers
            .iter()
            .filter(|c| c.state != api::CONTAINER_STOPPED)
            .filter_map(|c| {
                let pod = by_id.get(c.pod_sandbox_id.as_str())?;
                let limits = self.limits(pod, c)?;
                let current = c.linux.as_ref().and_then(|l| l.resources.as_ref());
                (!already_applied(current, &limits)).then(|| Self::update(&c.id, &limits))
            })
            .collect()
    }

    fn create_container(
        &self,
        pod: &api::PodSandbox,
        container: &api::Container,
    ) -> Option<api::ContainerAdjustment> {
        let limits = self.limits(pod, container);
        let cpus = self.container_cpus(pod, container);
        let rdt = self.container_rdt_class(pod, container);
        if limits.is_none() && cpus.is_none() && rdt.is_none() {
            return None;
        }
        let mut resources = limits.as_ref().map(linux_resources).unwrap_or_default();
        if let Some(cpus) = cpus {
            resources.cpu.get_or_insert_with(api::LinuxCpu::default).cpus = cpus.to_string();
        }
        if let Some(group) = rdt {
            resources.rdt_class = Some(api::OptionalString {
                value: group.name().to_string(),
            });
        }
        Some(api::ContainerAdjustment {
            linux: Some(api::LinuxContainerAdjustment {
                resources: Some(resources),
            }),
        })
    }

    fn update_container(
        &self,
        pod: &api::PodSandbox,
        container: &api::Container,
        requested: Option<&api::LinuxResources>,
    ) -> Vec<api::ContainerUpdate> {
        match self.limits(pod, container) {
            Some(limits) if !already_applied(requested, &limits) => {
                vec![Self::update(&container.id, &limits)]
            }
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn be_pod(spec: &str) -> api::PodSandbox {
        api::PodSandbox {
            id: "sandbox-1".into(),
            name: "batch".into(),
            namespace: "default".into(),
            labels: [(LABEL_QOS_CLASS.to_string(), "BE".to_string())].into(),
            annotations: [(ANNOTATION_EXTENDED_RESOURCE_SPEC.to_string(), spec.to_string())].into(),
            ..Default::default()
        }
    }

    fn container(name: &str) -> api::Container {
        api::Container {
            id: format!("ctr-{name}"),
            pod_sandbox_id: "sandbox-1".into(),
            name: name.into(),
            state: 1,
            ..Default::default()
        }
    }

    const SPEC: &str = r#"{"containers":{"main":{"requests":{"kubernetes.io/batch-cpu":"1000","kubernetes.io/batch-memory":"1Gi"},"limits":{"kubernetes.io/batch-cpu":"2000","kubernetes.io/batch-memory":"2Gi"}}}}"#;

    #[test]
    fn be_container_gets_the_reconcile_loops_values() {
        let limits = be_container_limits(&be_pod(SPEC), "main", &HookSettings::default())
            .unwrap()
            .unwrap();
        assert_eq!(
            limits,
            BeContainerLimits {
                cpu_shares: 1024,
                cfs_quota_us: 200_000,
                memory_limit_bytes: 2 << 30,
            }
        );
        let adjust = RuntimeHooks::default()
            .create_container(&be_pod(SPEC), &container("main"))
            .unwrap();
        let cpu = adjust.linux.unwrap().resources.unwrap().cpu.unwrap();
        assert_eq!(cpu.shares.unwrap().value, 1024);
        assert_eq!(cpu.quota.unwrap().value, 200_000);
        assert_eq!(cpu.period.unwrap().value, 100_000);
    }

    #[test]
    fn suppress_by_cfs_quota_leaves_quota_to_the_parent() {
        let settings = HookSettings {
            be_limits: BeLimitsSettings {
                suppress_by_cfs_quota: true,
                ..BeLimitsSettings::default()
            },
            ..HookSettings::default()
        };
        let limits = be_container_limits(&be_pod(SPEC), "main", &settings)
            .unwrap()
            .unwrap();
        assert_eq!(limits.cfs_quota_us, -1);
    }

    #[test]
    fn cpu_normalization_shrinks_the_quota_before_the_container_starts() {
        // 2000 batch milli-cores of baseline CPU on cores 1.25 times faster: ceil(200000 / 1.25).
        let settings = HookSettings {
            be_limits: BeLimitsSettings {
                cpu_normalization: koord_api::cpu_normalization::NormalizationRatio::parse("1.25").unwrap(),
                ..BeLimitsSettings::default()
            },
            ..HookSettings::default()
        };
        let limits = be_container_limits(&be_pod(SPEC), "main", &settings)
            .unwrap()
            .unwrap();
        assert_eq!((limits.cfs_quota_us, limits.cpu_shares), (160_000, 1024));
    }

    #[test]
    fn container_without_batch_resources_gets_minimum_shares_and_no_limits() {
        let limits = be_container_limits(&be_pod(SPEC), "sidecar", &HookSettings::default())
            .unwrap()
            .unwrap();
        assert_eq!(
            (limits.cpu_shares, limits.cfs_quota_us, limits.memory_limit_bytes),
            (2, -1, -1)
        );
    }

    #[test]
    fn not_applied_to_ls_pods_without_annotation_or_with_the_gate_off() {
        let mut ls = be_pod(SPEC);
        ls.labels.insert(LABEL_QOS_CLASS.into(), "LS".into());
        assert_eq!(
            be_container_limits(&ls, "main", &HookSettings::default()),
            Ok(None)
        );
        let mut bare = be_pod(SPEC);
        bare.annotations.clear();
        assert_eq!(
            be_container_limits(&bare, "main", &HookSettings::default()),
            Ok(None)
        );
        let off = HookSettings {
            batch_resource: false,
            ..HookSettings::default()
        };
        assert_eq!(be_container_limits(&be_pod(SPEC), "main", &off), Ok(None));
    }

    #[test]
    fn bad_annotation_is_an_error_and_leaves_the_container_unchanged() {
        let pod = be_pod("{not json");
        assert!(matches!(
            be_container_limits(&pod, "main", &HookSettings::default()),
            Err(HookError::BadSpec { .. })
        ));
        let bad_quantity = be_pod(r#"{"containers":{"main":{"limits":{"kubernetes.io/batch-cpu":"lots"}}}}"#);
        assert!(be_container_limits(&bad_quantity, "main", &HookSettings::default()).is_err());
        assert_eq!(
            RuntimeHooks::default().create_container(&pod, &container("main")),
            None
        );
    }

    #[test]
    fn synchronize_updates_only_containers_that_differ() {
        let hooks = RuntimeHooks::default();
        let pod = be_pod(SPEC);
        let limits = be_container_limits(&pod, "main", &HookSettings::default())
            .unwrap()
            .unwrap();
        let mut done = container("main");
        done.id = "done".into();
        done.linux = Some(api::LinuxContainer {
            resources: Some(linux_resources(&limits)),
            ..Default::default()
        });
        let mut stopped = container("main");
        stopped.id = "stopped".into();
        stopped.state = api::CONTAINER_STOPPED;
        let fresh = container("main");
        let updates = hooks.synchronize(&[pod], &[done, stopped, fresh]);
        let ids: Vec<_> = updates.iter().map(|u| u.container_id.as_str()).collect();
        assert_eq!(ids, ["ctr-main"]);
        assert!(updates[0].ignore_failure);
    }

    #[test]
    fn update_container_keeps_the_decided_values() {
        let hooks = RuntimeHooks::default();
        let pod = be_pod(SPEC);
        let limits = be_container_limits(&pod, "main", &HookSettings::default())
            .unwrap()
            .unwrap();
        let kubelet_asks = api::LinuxResources {
            cpu: Some(api::LinuxCpu {
                shares: Some(api::OptionalUInt64 { value: 2 }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let updates = hooks.update_container(&pod, &container("main"), Some(&kubelet_asks));
        assert_eq!(updates.len(), 1);
        assert!(
            hooks
                .update_container(&pod, &container("main"), Some(&linux_resources(&limits)))
                .is_empty()
        );
    }

    /// Pod cgroups of a fake node: every pod is `kube_qos` and its cgroup has `fits_in`.
    struct FakePodCgroups {
        kube_qos: KubeQoSClass,
        fits_in: Option<CpuList>,
    }

    impl PodCgroups for FakePodCgroups {
        fn pod_cgroup(&self, pod: &api::PodSandbox) -> Result<PodCgroup, String> {
            if pod.uid == "broken" {
                return Err("no such cgroup".into());
            }
            Ok(PodCgroup {
                kube_qos: self.kube_qos,
                fits_in: self.fits_in.clone(),
            })
        }
    }

    fn cpus(text: &str) -> CpuList {
        CpuList::parse(text).unwrap()
    }

    fn hooks(settings: HookSettings, fits_in: Option<&str>, view: Option<RuntimeCpusets>) -> RuntimeHooks {
        let hooks = RuntimeHooks::new(settings).with_pod_cgroups(Arc::new(FakePodCgroups {
            kube_qos: KubeQoSClass::Burstable,
            fits_in: fits_in.map(cpus),
        }));
        hooks.set_runtime_cpusets(view.map(Arc::new));
        hooks
    }

    fn ls_pod(qos: &str, annotations: &[(&str, &str)]) -> api::PodSandbox {
        api::PodSandbox {
            id: "sandbox-ls".into(),
            name: "web".into(),
            namespace: "default".into(),
            uid: "uid-web".into(),
            labels: [(LABEL_QOS_CLASS.to_string(), qos.to_string())].into(),
            annotations: annotations
                .iter()
                .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                .collect(),
            ..Default::default()
        }
    }

    fn view() -> RuntimeCpusets {
        RuntimeCpusets {
            shared: cpus("0-1"),
            be_pool: None,
            allocations: [(("uid-web".to_string(), "main".to_string()), cpus("3"))].into(),
        }
    }

    fn adjusted_cpus(hooks: &RuntimeHooks, pod: &api::PodSandbox) -> Option<String> {
        let adjust = hooks.create_container(pod, &container("main"))?;
        Some(adjust.linux?.resources?.cpu?.cpus)
    }

    #[test]
    fn scheduler_bound_lsr_container_starts_on_its_cpus_even_before_a_round() {
        let bound = [(ANNOTATION_RESOURCE_STATUS, r#"{"cpuset": "2"}"#)];
        let h = hooks(HookSettings::default(), Some("0-3"), None);
        let adjust = h
            .create_container(&ls_pod("LSR", &bound), &container("main"))
            .unwrap();
        let resources = adjust.linux.unwrap().resources.unwrap();
        let cpu = resources.cpu.unwrap();
        assert_eq!(cpu.cpus, "2");
        // Only the cpuset: an LSR container gets no BE limits.
        assert!(cpu.shares.is_none() && cpu.quota.is_none() && resources.memory.is_none());
        // An LS pod with the same annotation is not bound (LSE/LSR only), and with the CPU set
        // policies idle (no round view) nothing is decided for it.
        assert_eq!(adjusted_cpus(&h, &ls_pod("LS", &bound)), None);
        // Gate CPUSetAllocator off: the scheduler's CPUs are not applied.
        let off = HookSettings {
            cpuset_allocator: false,
            ..HookSettings::default()
        };
        assert_eq!(
            adjusted_cpus(&hooks(off, Some("0-3"), None), &ls_pod("LSR", &bound)),
            None
        );
        // The kubelet's static CPU manager owns cpusets: nothing.
        let kubelet = HookSettings {
            cpusets: false,
            ..HookSettings::default()
        };
        assert_eq!(
            adjusted_cpus(&hooks(kubelet, Some("0-3"), None), &ls_pod("LSR", &bound)),
            None
        );
        // A set that does not fit in the pod cgroup (v1) would fail the container: left alone.
        assert_eq!(
            adjusted_cpus(
                &hooks(HookSettings::default(), Some("0-1"), None),
                &ls_pod("LSR", &bound)
            ),
            None
        );
        // cgroup v2: no such rule.
        assert_eq!(
            adjusted_cpus(
                &hooks(HookSettings::default(), None, None),
                &ls_pod("LSR", &bound)
            )
            .as_deref(),
            Some("2")
        );
        // Without a way to find pod cgroups, the hook sets no cpuset at all.
        let bare = RuntimeHooks::new(HookSettings::default());
        assert_eq!(adjusted_cpus(&bare, &ls_pod("LSR", &bound)), None);
    }

    #[test]
    fn containers_start_where_the_round_keeps_them() {
        let h = hooks(HookSettings::default(), Some("0-3"), Some(view()));
        // An allocation of the round (a restarted container).
        let exclusive = [(ANNOTATION_CPUSET_POLICY, "exclusive")];
        assert_eq!(adjusted_cpus(&h, &ls_pod("LS", &exclusive)).as_deref(), Some("3"));
        // An exclusive container the round has not allocated yet: left to the round.
        let mut new = ls_pod("LS", &exclusive);
        new.uid = "uid-new".into();
        assert_eq!(adjusted_cpus(&h, &new), None);
        // A policy that does not parse: left to the round, which reports it.
        let mut typo = ls_pod("LS", &[(ANNOTATION_CPUSET_POLICY, "exclusve")]);
        typo.uid = "uid-new".into();
        assert_eq!(adjusted_cpus(&h, &typo), None);
        // Crane's annotation is read too.
        let mut crane = ls_pod("LS", &[(ANNOTATION_CRANE_CPU_MANAGER, "exclusive")]);
        crane.uid = "uid-new".into();
        assert_eq!(adjusted_cpus(&h, &crane), None);
        // Any other container: the shared pool.
        let mut plain = ls_pod("LS", &[]);
        plain.uid = "uid-new".into();
        assert_eq!(adjusted_cpus(&h, &plain).as_deref(), Some("0-1"));
        // A pod whose cgroup cannot be found: nothing.
        plain.uid = "broken".into();
        assert_eq!(adjusted_cpus(&h, &plain), None);
    }

    #[test]
    fn be_containers_get_the_be_pool_only_when_cpu_suppress_does_not_own_it() {
        let h = hooks(HookSettings::default(), Some("0-3"), Some(view()));
        let adjust = h.create_container(&be_pod(SPEC), &container("main")).unwrap();
        let cpu = adjust.linux.unwrap().resources.unwrap().cpu.unwrap();
        assert_eq!((cpu.cpus.as_str(), cpu.quota.unwrap().value), ("", 200_000));
        let pooled = RuntimeCpusets {
            be_pool: Some(cpus("1-2")),
            ..view()
        };
        let h = hooks(HookSettings::default(), Some("0-3"), Some(pooled));
        let adjust = h.create_container(&be_pod(SPEC), &container("main")).unwrap();
        let cpu = adjust.linux.unwrap().resources.unwrap().cpu.unwrap();
        assert_eq!((cpu.cpus.as_str(), cpu.quota.unwrap().value), ("1-2", 200_000));
    }

    /// A resctrl tree with the round's groups `groups` (each with its `tasks` file).
    fn resctrl_tree(groups: &[&str]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for g in groups {
            std::fs::create_dir(dir.path().join(g)).unwrap();
            std::fs::write(dir.path().join(g).join("tasks"), "").unwrap();
        }
        dir
    }

    const LS_AND_BE: ResctrlClasses = ResctrlClasses {
        lsr: false,
        ls: true,
        be: true,
    };

    fn rdt_of(adjust: Option<api::ContainerAdjustment>) -> Option<String> {
        Some(adjust?.linux?.resources?.rdt_class?.value)
    }

    #[test]
    fn containers_start_in_their_pods_resctrl_group() {
        let tree = resctrl_tree(&["LSR", "LS", "BE"]);
        let settings = HookSettings {
            resctrl: LS_AND_BE,
            ..HookSettings::default()
        };
        let h = RuntimeHooks::new(settings).with_rdt(RdtAvailability::Mounted(tree.path().to_path_buf()));
        // A BE container: its batch limits and the BE class in one adjustment.
        let adjust = h.create_container(&be_pod(SPEC), &container("main")).unwrap();
        let resources = adjust.linux.unwrap().resources.unwrap();
        assert_eq!(resources.rdt_class.unwrap().value, "BE");
        assert_eq!(resources.cpu.unwrap().shares.unwrap().value, 1024);
        // An LS container: only the class.
        let adjust = h
            .create_container(&ls_pod("LS", &[]), &container("main"))
            .unwrap();
        let resources = adjust.linux.unwrap().resources.unwrap();
        assert_eq!(resources.rdt_class.unwrap().value, "LS");
        assert!(resources.cpu.is_none() && resources.memory.is_none());
        // LSR's resctrl is not enabled: nothing at all to adjust.
        assert_eq!(h.create_container(&ls_pod("LSR", &[]), &container("main")), None);
        // The NodeSLO changes (or goes): the next container follows it.
        h.set_settings(HookSettings::default());
        assert_eq!(h.create_container(&ls_pod("LS", &[]), &container("main")), None);
    }

    #[test]
    fn no_resctrl_class_without_the_gate_support_or_the_group() {
        let tree = resctrl_tree(&["BE"]);
        let settings = HookSettings {
            resctrl: LS_AND_BE,
            ..HookSettings::default()
        };
        // Gate off (the default), resctrl unsupported, dry-run: no class.
        for rdt in [
            RdtAvailability::GateOff,
            RdtAvailability::Unsupported("no cat_l3 or mba".into()),
            RdtAvailability::DryRun,
        ] {
            let h = RuntimeHooks::new(settings).with_rdt(rdt);
            assert_eq!(
                rdt_of(h.create_container(&ls_pod("LS", &[]), &container("main"))),
                None
            );
        }
        // The LS group does not exist (yet): the class would fail the container.
        let h = RuntimeHooks::new(settings).with_rdt(RdtAvailability::Mounted(tree.path().to_path_buf()));
        assert_eq!(h.create_container(&ls_pod("LS", &[]), &container("main")), None);
        // BE exists: the BE container gets it.
        assert_eq!(
            rdt_of(h.create_container(&be_pod(SPEC), &container("main"))).as_deref(),
            Some("BE")
        );
    }

    #[test]
    fn an_unlabelled_pods_class_comes_from_its_cgroup_as_in_the_round() {
        let tree = resctrl_tree(&["LSR", "LS", "BE"]);
        let settings = HookSettings {
            resctrl: LS_AND_BE,
            ..HookSettings::default()
        };
        let mut plain = ls_pod("LS", &[]);
        plain.labels.clear();
        // Without a pod cgroup lookup the class is unknown: no class.
        let bare = RuntimeHooks::new(settings).with_rdt(RdtAvailability::Mounted(tree.path().to_path_buf()));
        assert_eq!(bare.create_container(&plain, &container("main")), None);
        // A Burstable pod cgroup: LS, as the round resolves the pod.
        let h = hooks(settings, None, None).with_rdt(RdtAvailability::Mounted(tree.path().to_path_buf()));
        assert_eq!(
            rdt_of(h.create_container(&plain, &container("main"))).as_deref(),
            Some("LS")
        );
        // A pod whose cgroup cannot be found: no class.
        plain.uid = "broken".into();
        assert_eq!(rdt_of(h.create_container(&plain, &container("main"))), None);
    }

    #[test]
    fn running_containers_never_get_a_resctrl_class() {
        let tree = resctrl_tree(&["LSR", "LS", "BE"]);
        let settings = HookSettings {
            resctrl: LS_AND_BE,
            ..HookSettings::default()
        };
        let h = RuntimeHooks::new(settings).with_rdt(RdtAvailability::Mounted(tree.path().to_path_buf()));
        let pod = be_pod(SPEC);
        let updates = h.synchronize(std::slice::from_ref(&pod), &[container("main")]);
        let updates = [updates, h.update_container(&pod, &container("main"), None)].concat();
        assert_eq!(updates.len(), 2);
        for u in updates {
            assert_eq!(u.linux.unwrap().resources.unwrap().rdt_class, None);
        }
    }
}
