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
/// the scheduler, or allocations are held): the live loop reads the pods' cpusets only then.
pub fn cpuset_policy_wanted(pods: &[PodMeta], state: &CpusetAllocations) -> bool {
    !state.allocations.is_empty()
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
            let spec = p
                .pod
                .spec
                .as_ref()
                .map(|s| s.containers.as_slice())
                .unwrap_or(&[]);
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
    if input.node.kubelet_cpu_manager != KubeletCpuManager::None {
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
