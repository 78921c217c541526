//! cpuset_policy's view of the engine's input (pure).

use koord_api::resources::container_amounts;

use super::build::{bound_cpus, is_be, topology};
use super::{EngineInput, Report};
use crate::pod::PodMeta;
use crate::strategies::FILE_CPUSET_CPUS;
use crate::strategies::cpu_suppress::CgroupState;
use crate::strategies::cpuset::CpuList;
use crate::strategies::cpuset_policy::{
    self, CpusetAllocations, CpusetPolicy, CpusetPolicyInput, CpusetPolicyPlan, KubeletCpuManager,
    PolicyContainer, PolicyPod,
};
use crate::{CgroupDir, KubeCgroupPaths};

/// Whether cpuset_policy has work on this node (a pod asks for a policy or is bound to CPUs by
/// the scheduler, allocations are held, or the shared pool must be widened back): the live loop
/// reads the pods' cpusets only then.
pub fn cpuset_policy_wanted(pods: &[PodMeta], state: &CpusetAllocations) -> bool {
    !state.allocations.is_empty()
        || state.narrowed
        || pods.iter().filter(|p| p.is_running()).any(|p| {
            !matches!(
                CpusetPolicy::of_annotations(p.pod.metadata.annotations.as_ref()),
                Ok(None)
            ) || (matches!(p.qos, koord_api::QoSClass::Lse | koord_api::QoSClass::Lsr)
                && bound_cpus(p).is_some())
        })
}

fn qos_dir(p: &PodMeta, paths: &KubeCgroupPaths) -> CgroupDir {
    paths.qos_dir(p.kube_qos)
}

/// The `cpuset.cpus` reads the strategy needs: every running pod's QoS, pod and container dir.
pub(super) fn reads(pods: &[PodMeta], paths: &KubeCgroupPaths, reads: &mut Vec<(String, &'static str)>) {
    let mut seen = std::collections::BTreeSet::new();
    for p in pods.iter().filter(|p| p.is_running()) {
        let dirs = [qos_dir(p, paths), p.cgroup_dir(paths)]
            .into_iter()
            .chain(p.containers.iter().filter_map(|c| p.container_dir(paths, c)));
        for d in dirs {
            let d = d.to_string();
            if seen.insert(d.clone()) {
                reads.push((d, FILE_CPUSET_CPUS));
            }
        }
    }
}

fn state(input: &EngineInput<'_>, dir: CgroupDir) -> CgroupState {
    CgroupState {
        cpuset: input.cgroups.cpusets.get(&dir.to_string()).cloned(),
        cfs_quota_us: None,
        dir,
    }
}

/// The running pods as the strategy sees them.
pub(super) fn policy_pods(input: &EngineInput<'_>) -> Vec<PolicyPod> {
    input
        .pods
        .iter()
        .filter(|p| p.is_running())
        .map(|p| {
            let spec = p.spec_containers();
            // Gate CPUSetAllocator (on by default, upstream's name): apply the scheduler's
            // cpusets of LSE/LSR pods.
            let bound = (input.gates.enabled("CPUSetAllocator")
                && matches!(p.qos, koord_api::QoSClass::Lse | koord_api::QoSClass::Lsr))
            .then(|| bound_cpus(p))
            .flatten();
            PolicyPod {
                uid: p.uid.as_str().to_owned(),
                namespace: p.namespace.clone(),
                name: p.name.clone(),
                qos: p.qos,
                be: is_be(p),
                policy: CpusetPolicy::of_annotations(p.pod.metadata.annotations.as_ref())
                    .map_err(|e| e.to_string()),
                bound,
                qos_dir: state(input, qos_dir(p, input.paths)),
                pod_dir: state(input, p.cgroup_dir(input.paths)),
                containers: spec
                    .iter()
                    .map(|c| PolicyContainer {
                        name: c.name.clone(),
                        cpu_limit_milli: container_amounts(c)
                            .ok()
                            .and_then(|a| a.limits.get("cpu").copied()),
                        dir: p
                            .containers
                            .iter()
                            .find(|m| m.name == c.name)
                            .and_then(|m| p.container_dir(input.paths, m))
                            .map(|d| state(input, d)),
                    })
                    .collect(),
            }
        })
        .collect()
}

fn decide(input: &EngineInput<'_>, pods: &[PolicyPod], manage_be: bool) -> CpusetPolicyPlan {
    let topology = topology(input);
    cpuset_policy::decide(&CpusetPolicyInput {
        topology: &topology,
        reserved: &input.node.reserved_cpus,
        pods,
        state: &input.state.cpuset_policy,
        manage_be,
    })
}

/// Runs the strategy; `suppress_owns_be`: cpu_suppress ran and writes BE cpusets itself.
pub(super) fn run(input: &EngineInput<'_>, suppress_owns_be: bool) -> Report<CpusetPolicyPlan> {
    if !cpuset_policy_wanted(input.pods, &input.state.cpuset_policy) {
        return Report::skipped("no pod asks for a CPU set policy or is bound to CPUs by the scheduler");
    }
    let pods = policy_pods(input);
    if !cpuset_policy::wanted(&pods, &input.state.cpuset_policy) {
        return Report::skipped("no pod asks for a CPU set policy or is bound to CPUs by the scheduler");
    }
    if input.node.kubelet_cpu_manager.is_static() {
        return Report::skipped(
            "refused: the kubelet runs the static CPU manager policy and owns container cpusets; \
             set the kubelet's cpuManagerPolicy to none to use CPU set policies",
        );
    }
    Report::Ran(decide(input, &pods, !suppress_owns_be))
}

/// CPUs held exclusively this round (what BE must leave), empty when the strategy is idle or
/// refused.
pub(super) fn exclusive_cpus(input: &EngineInput<'_>) -> CpuList {
    if input.node.kubelet_cpu_manager != KubeletCpuManager::None
        || !cpuset_policy_wanted(input.pods, &input.state.cpuset_policy)
    {
        return CpuList::new();
    }
    let pods = policy_pods(input);
    if !cpuset_policy::wanted(&pods, &input.state.cpuset_policy) {
        return CpuList::new();
    }
    decide(input, &pods, false).exclusive_cpus
}

/// The allocation table read back from the cgroups (the state file was lost or corrupt): see
/// [`cpuset_policy::rebuild_from_cgroups`]. `input.cgroups` must hold the pods' cpusets
/// ([`super::ReadScope::cpuset_policy`]).
pub fn rebuild_cpuset_allocations(input: &EngineInput<'_>) -> CpusetAllocations {
    let pods = policy_pods(input);
    cpuset_policy::rebuild_from_cgroups(&pods, &topology(input))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::collections::BTreeSet;
    use std::sync::Arc;

    use koord_api::NodeSLOSpec;
    use serde_json::json;

    use super::super::{
        CgroupFacts, EngineInput, EngineOptions, EngineState, NodeFacts, UsageFacts, run as run_engine,
    };
    use super::*;
    use crate::FeatureGates;
    use crate::paths::CgroupDriver;
    use crate::strategies::cpuset::CpuInfo;

    fn pod(name: &str, qos: &str, annotations: serde_json::Value) -> PodMeta {
        let pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
                         "labels": {"koordinator.sh/qosClass": qos}, "annotations": annotations},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": "1"}}}]},
            "status": {"phase": "Running", "qosClass": "Burstable",
                       "containerStatuses": [{"name": "c", "containerID": format!("containerd://{name}")}]}
        }))
        .unwrap();
        PodMeta::new(Arc::new(pod)).unwrap()
    }

    fn plan(node: &NodeFacts, pods: &[PodMeta], gates: &str) -> super::super::EnginePlan {
        let topology: Vec<CpuInfo> = (0..4)
            .map(|cpu| CpuInfo {
                cpu,
                core: cpu,
                socket: 0,
                node: 0,
            })
            .collect();
        let slo: NodeSLOSpec = serde_json::from_value(json!({})).unwrap();
        run_engine(&EngineInput {
            node,
            pods,
            paths: &KubeCgroupPaths::new(CgroupDriver::Cgroupfs),
            node_slo: Some(&slo),
            gates: &FeatureGates::parse(gates).unwrap(),
            usage: &UsageFacts::default(),
            cgroups: &CgroupFacts::default(),
            topology: &topology,
            in_flight: &BTreeSet::new(),
            state: &EngineState::default(),
            now_seconds: 0.0,
            options: EngineOptions::default(),
        })
    }

    fn cpus_written(p: &super::super::EnginePlan) -> Vec<(String, String)> {
        p.writes
            .iter()
            .filter(|w| w.strategy == cpuset_policy::STRATEGY)
            .map(|w| (w.cgroup.to_string(), w.value.to_string()))
            .collect()
    }

    #[test]
    fn cpuset_policy_engine_refuses_under_the_static_kubelet_and_honours_the_gate() {
        let pods = vec![
            pod("ex", "LS", json!({"koordinator.sh/cpuset-policy": "exclusive"})),
            pod(
                "lsr",
                "LSR",
                json!({"scheduling.koordinator.sh/resource-status": "{\"cpuset\": \"0\"}"}),
            ),
        ];
        let mut node = NodeFacts {
            cpu_capacity_milli: 4000,
            cpu_allocatable_milli: 4000,
            ..NodeFacts::default()
        };
        let ran = plan(&node, &pods, "");
        assert_eq!(
            cpus_written(&ran),
            [
                ("kubepods/burstable/poduid-ex/ex".to_owned(), "3".to_owned()),
                ("kubepods/burstable/poduid-lsr/lsr".to_owned(), "0".to_owned()),
            ]
        );
        assert_eq!(ran.next_state.cpuset_policy.allocations.len(), 1);
        // Gate CPUSetAllocator off: the scheduler's cpuset is not applied; the LSR pod is shared.
        let off = plan(&node, &pods, "CPUSetAllocator=false");
        assert!(
            cpus_written(&off).contains(&("kubepods/burstable/poduid-lsr/lsr".to_owned(), "0-2".to_owned()))
        );
        // The kubelet's static CPU manager: refused, nothing written, nothing allocated.
        node.kubelet_cpu_manager = KubeletCpuManager::Static {
            shared: CpuList::parse("0-3").unwrap(),
        };
        let refused = plan(&node, &pods, "");
        assert!(cpus_written(&refused).is_empty());
        match &refused.strategies.cpuset_policy {
            Report::Skipped { skipped } => assert!(skipped.starts_with("refused"), "{skipped}"),
            other => panic!("{other:?}"),
        }
        assert!(refused.next_state.cpuset_policy.allocations.is_empty());
    }
}
