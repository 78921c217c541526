//! The hooks' decisions: a pod sandbox and container (as the runtime describes them) in, the
//! container's resources out. Pure apart from reading the current settings.
//!
//! BatchResource: a container of a pod labelled `koordinator.sh/qosClass: BE` gets the CPU
//! shares, CFS quota and memory limit of its batch resources, from
//! [`be_limits::container_values`], the function the reconcile loop uses. The runtime does not
//! see extended resources, so the batch amounts come from the pod annotation
//! `node.koordinator.sh/extended-resource-spec` that koord-webhook writes (as upstream). A BE
//! pod without that annotation is left to the reconcile loop.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::{Container as KubeContainer, ResourceRequirements};
use koord_api::QoSClass;
use koord_api::names::{ANNOTATION_EXTENDED_RESOURCE_SPEC, LABEL_QOS_CLASS};
use koord_api::quantity::ResourceList;
use koord_api::resources::container_amounts;
use koordlet_core::strategies::CFS_PERIOD_US;
use koordlet_core::strategies::be_limits::{self, BeContainerLimits, BeLimitsSettings};
use serde::Deserialize;
use tracing::warn;

use super::api;
use super::session::NriHandler;

/// What the hooks decide with; the agent refreshes it from the gates and the NodeSLO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HookSettings {
    /// Feature gate `BatchResource`.
    pub batch_resource: bool,
    /// be_limits' settings (the same as the reconcile loop's).
    pub be_limits: BeLimitsSettings,
}

impl Default for HookSettings {
    fn default() -> Self {
        HookSettings {
            batch_resource: true,
            be_limits: BeLimitsSettings::default(),
        }
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
#[derive(Debug, Clone, Default)]
pub struct BeHooks {
    settings: Arc<RwLock<HookSettings>>,
}

impl BeHooks {
    /// Hooks deciding with `settings`.
    pub fn new(settings: HookSettings) -> Self {
        BeHooks {
            settings: Arc::new(RwLock::new(settings)),
        }
    }

    /// Replaces the settings (the agent calls this when the gates or the NodeSLO change).
    pub fn set_settings(&self, settings: HookSettings) {
        *self.settings.write().unwrap_or_else(|p| p.into_inner()) = settings;
    }

    fn settings(&self) -> HookSettings {
        *self.settings.read().unwrap_or_else(|p| p.into_inner())
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

impl NriHandler for BeHooks {
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
        let limits = self.limits(pod, container)?;
        Some(api::ContainerAdjustment {
            linux: Some(api::LinuxContainerAdjustment {
                resources: Some(linux_resources(&limits)),
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
        let adjust = BeHooks::default()
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
            },
            ..HookSettings::default()
        };
        let limits = be_container_limits(&be_pod(SPEC), "main", &settings)
            .unwrap()
            .unwrap();
        assert_eq!(limits.cfs_quota_us, -1);
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
            BeHooks::default().create_container(&pod, &container("main")),
            None
        );
    }

    #[test]
    fn synchronize_updates_only_containers_that_differ() {
        let hooks = BeHooks::default();
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
        let hooks = BeHooks::default();
        let pod = be_pod(SPEC);
        let limits = be_container_limits(&pod, "main", &HookSettings::default())
            .unwrap()
            .unwrap();
        let kubelet_asks = api::LinuxResources {
            cpu: Some(api::LinuxCpu {
                shares: Some(api::OptionalUInt64 { value: 2 }),
                ..Default::default()
            }),
            memory: None,
        };
        let updates = hooks.update_container(&pod, &container("main"), Some(&kubelet_asks));
        assert_eq!(updates.len(), 1);
        assert!(
            hooks
                .update_container(&pod, &container("main"), Some(&linux_resources(&limits)))
                .is_empty()
        );
    }
}
