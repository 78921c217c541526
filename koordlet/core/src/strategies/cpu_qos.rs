//! cpu_qos: the CPU identity of each QoS class (`resourceQOSStrategy.<class>.cpuQOS`), and
//! which pods get a core-scheduling cookie.
//!
//! Upstream enforces class CPU priority with Alibaba's Anolis kernel: `cpu.bvt_warp_ns` (group
//! identity, -1 for BE up to 2 for LS). Mainline kernels (5.15+) have the counterpart
//! `cpu.idle`: a cgroup with `cpu.idle=1` is scheduled as SCHED_IDLE against its siblings, so
//! a waking LS task preempts BE work at once instead of waiting for its CFS share.
//!
//! Mechanism, from what the agent probed ([`CpuQosKernel`]) and `policies.cpuPolicy`:
//! - `groupIdentity` (the default policy) on a kernel with `cpu.bvt_warp_ns`: upstream's
//!   values are written there (LSR/LSE the LSR class value, LS the LS value, BE the BE value;
//!   defaults 2/2/-1, 0 for a class whose `cpuQOS.enable` is not true);
//! - otherwise `cpu.idle`: 1 for a class whose cpuQOS is enabled with `groupIdentity: -1`
//!   (BE's default) or `schedIdle: 1`, 0 for every other class.
//!
//! Which cgroups: every running pod's cgroup gets its class's value; the kube-QoS directories
//! get the BE value (besteffort) and the LS value (burstable). The besteffort directory matters
//! most: LS pods live under burstable or directly under kubepods, so the scheduler compares
//! them with the besteffort directory as a whole. On `cpu.idle`, the besteffort directory stays
//! at 0 while a pod of another class lives in it (an idle parent would starve it too); the plan
//! says which pod.
//!
//! Core scheduling ([`decide_core_sched`]): with the `CoreSched` gate on and
//! `policies.cpuPolicy: coreSched`, every running LSR and LSE pod gets a cookie of its own, so
//! no task of another pod (BE included) runs on the SMT sibling of its CPU. The agent creates
//! and shares the cookies (`prctl(PR_SCHED_CORE)` on the pod's tasks).

use std::collections::BTreeMap;

use koord_api::nodeslo::{CpuQosPolicy, ResourceQos, ResourceQosStrategy};
use koord_api::{KubeQoSClass, QoSClass};
use serde::Serialize;

use super::engine::{EngineInput, Report};
use crate::pod::PodMeta;
use crate::resource::CgroupResource;
use crate::{CgroupWrite, KubeCgroupPaths};

/// The strategy name in plans and audit lines.
pub const STRATEGY: &str = "cpu_qos";
/// The name of the core-scheduling decision in plans.
pub const CORE_SCHED: &str = "core_sched";

/// Which per-cgroup CPU QoS files this kernel has (probed once by the agent in the kubepods
/// cgroup; `plan` without a cgroup tree assumes a mainline kernel with `cpu.idle`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CpuQosKernel {
    /// `cpu.idle` (mainline 5.15+, v1 cpu controller and v2).
    pub idle: bool,
    /// `cpu.bvt_warp_ns` (Anolis group identity).
    pub bvt: bool,
}

/// The file that carries the class identity on this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Mechanism {
    /// `cpu.idle`: 1 (SCHED_IDLE) or 0.
    #[serde(rename = "cpu.idle")]
    SchedIdle,
    /// `cpu.bvt_warp_ns`: -1..=2.
    #[serde(rename = "cpu.bvt_warp_ns")]
    GroupIdentity,
}

impl Mechanism {
    fn resource(self) -> CgroupResource {
        match self {
            Mechanism::SchedIdle => CgroupResource::CpuIdle,
            Mechanism::GroupIdentity => CgroupResource::CpuBvtWarpNs,
        }
    }
}

/// One class's resolved cpuQOS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClassCpuQos {
    /// `cpuQOS.enable`.
    pub enable: bool,
    /// `groupIdentity`, clamped to -1..=2 (0 when disabled).
    pub group_identity: i64,
    /// `schedIdle`, clamped to 0..=1 (0 when disabled).
    pub sched_idle: i64,
}

impl ClassCpuQos {
    /// The value this class's cgroups get with `mechanism`.
    pub fn value(self, mechanism: Mechanism) -> i64 {
        match mechanism {
            Mechanism::GroupIdentity => self.group_identity,
            Mechanism::SchedIdle => i64::from(self.sched_idle == 1 || self.group_identity < 0),
        }
    }
}

/// The NodeSLO class that configures pods of `qos` (LSE follows LSR; a pod without a class
/// counts as LS).
fn class_of(strategy: &ResourceQosStrategy, qos: QoSClass) -> (Option<&ResourceQos>, i64) {
    match qos {
        QoSClass::Lse | QoSClass::Lsr => (strategy.lsr_class.as_ref(), 2),
        QoSClass::Be => (strategy.be_class.as_ref(), -1),
        QoSClass::System => (strategy.system_class.as_ref(), 0),
        QoSClass::Ls | QoSClass::None => (strategy.ls_class.as_ref(), 2),
    }
}

/// `qos`'s cpuQOS with upstream's defaults for unset fields (groupIdentity LSR/LS 2, BE -1,
/// SYSTEM 0; schedIdle 0) and upstream's reset for a disabled class (everything 0).
pub fn class_cpu_qos(strategy: &ResourceQosStrategy, qos: QoSClass) -> ClassCpuQos {
    let (class, default_identity) = class_of(strategy, qos);
    let cfg = class.and_then(|c| c.cpu_qos.as_ref());
    if cfg.and_then(|c| c.enable) != Some(true) {
        return ClassCpuQos {
            enable: false,
            group_identity: 0,
            sched_idle: 0,
        };
    }
    ClassCpuQos {
        enable: true,
        group_identity: cfg
            .and_then(|c| c.group_identity)
            .unwrap_or(default_identity)
            .clamp(-1, 2),
        sched_idle: cfg.and_then(|c| c.sched_idle).unwrap_or(0).clamp(0, 1),
    }
}

/// Picks the file to write, `None` when the kernel has none that fits.
pub fn mechanism(kernel: CpuQosKernel, policy: Option<CpuQosPolicy>) -> Option<Mechanism> {
    let core_sched = policy == Some(CpuQosPolicy::CoreSched);
    if kernel.bvt && !core_sched {
        Some(Mechanism::GroupIdentity)
    } else if kernel.idle {
        Some(Mechanism::SchedIdle)
    } else {
        None
    }
}

/// One class in the plan: its resolved cpuQOS and the value written for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ClassReport {
    /// The resolved cpuQOS.
    #[serde(flatten)]
    pub config: ClassCpuQos,
    /// The value its cgroups get with the plan's mechanism.
    pub value: i64,
}

/// What cpu_qos looks at.
#[derive(Debug, Clone, Copy)]
pub struct CpuQosInput<'a> {
    /// The NodeSLO's `resourceQOSStrategy`.
    pub strategy: &'a ResourceQosStrategy,
    /// The node's pods.
    pub pods: &'a [PodMeta],
    /// Where their cgroups are.
    pub paths: &'a KubeCgroupPaths,
    /// The file to write.
    pub mechanism: Mechanism,
}

/// `strategies.cpu_qos` of the plan, with its writes.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CpuQosPlan {
    /// The file written.
    pub mechanism: Mechanism,
    /// Each class's resolved cpuQOS and the value its cgroups get.
    pub classes: BTreeMap<&'static str, ClassReport>,
    /// Why the besteffort directory does not get the BE value, if it does not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub besteffort_kept: Option<String>,
    /// Writes, in the order to apply (QoS directories first, then pods).
    #[serde(skip)]
    pub writes: Vec<CgroupWrite>,
}

/// Decides every pod's and QoS directory's value.
pub fn decide(input: &CpuQosInput<'_>) -> CpuQosPlan {
    let m = input.mechanism;
    let resource = m.resource();
    let class = |qos| class_cpu_qos(input.strategy, qos);
    let classes = [
        ("LSR", QoSClass::Lsr),
        ("LS", QoSClass::Ls),
        ("BE", QoSClass::Be),
        ("SYSTEM", QoSClass::System),
    ]
    .into_iter()
    .map(|(name, qos)| {
        let config = class(qos);
        (
            name,
            ClassReport {
                config,
                value: config.value(m),
            },
        )
    })
    .collect();
    let running = || input.pods.iter().filter(|p| p.is_running());
    let be_value = class(QoSClass::Be).value(m);
    let besteffort_kept = match m {
        Mechanism::SchedIdle if be_value == 1 => running()
            .find(|p| p.kube_qos == KubeQoSClass::BestEffort && p.qos != QoSClass::Be)
            .map(|p| {
                format!(
                    "{}/{} ({}) lives in the besteffort cgroup: it stays at cpu.idle=0",
                    p.namespace,
                    p.name,
                    p.qos.name()
                )
            }),
        _ => None,
    };
    let besteffort_value = if besteffort_kept.is_some() { 0 } else { be_value };
    let mut writes = vec![
        CgroupWrite::int(
            &input.paths.qos_dir(KubeQoSClass::Burstable),
            resource,
            class(QoSClass::Ls).value(m),
            STRATEGY,
        ),
        CgroupWrite::int(
            &input.paths.qos_dir(KubeQoSClass::BestEffort),
            resource,
            besteffort_value,
            STRATEGY,
        ),
    ];
    writes.extend(running().map(|p| {
        CgroupWrite::int(
            &p.cgroup_dir(input.paths),
            resource,
            class(p.qos).value(m),
            STRATEGY,
        )
    }));
    CpuQosPlan {
        mechanism: m,
        classes,
        besteffort_kept,
        writes,
    }
}

/// A pod that gets a core-scheduling cookie of its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CookiePod {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID (the agent keys its cookies by it).
    pub uid: String,
    /// The pod's cgroup directory (its tasks are the ones that share the cookie).
    pub cgroup: String,
}

/// `strategies.core_sched` of the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CoreSchedPlan {
    /// The pods that get a cookie, one each.
    pub pods: Vec<CookiePod>,
}

/// Every running LSR and LSE pod gets one cookie of its own.
pub fn decide_core_sched(pods: &[PodMeta], paths: &KubeCgroupPaths) -> CoreSchedPlan {
    CoreSchedPlan {
        pods: pods
            .iter()
            .filter(|p| p.is_running() && matches!(p.qos, QoSClass::Lse | QoSClass::Lsr))
            .map(|p| CookiePod {
                namespace: p.namespace.clone(),
                name: p.name.clone(),
                uid: p.uid.as_str().to_owned(),
                cgroup: p.cgroup_dir(paths).to_string(),
            })
            .collect(),
    }
}

fn gate_off(input: &EngineInput<'_>, gate: &str) -> Option<String> {
    (!input.gates.enabled(gate)).then(|| format!("feature gate {gate} is off"))
}

fn skipped<T>(reason: impl Into<String>) -> Report<T> {
    Report::Skipped {
        skipped: reason.into(),
    }
}

/// The engine's step: runs cpu_qos when the gate, the NodeSLO and the kernel allow, appending
/// its writes to `writes`.
pub fn engine_step(input: &EngineInput<'_>, writes: &mut Vec<CgroupWrite>) -> Report<CpuQosPlan> {
    if let Some(r) = gate_off(input, "GroupIdentity") {
        return skipped(r);
    }
    let Some(strategy) = input.node_slo.and_then(|s| s.resource_qos_strategy.as_ref()) else {
        return skipped("no resourceQOSStrategy in the NodeSLO");
    };
    let policy = strategy.policies.as_ref().and_then(|p| p.cpu_policy);
    let Some(mechanism) = mechanism(input.cgroups.cpu_qos_kernel, policy) else {
        return skipped("this kernel has neither cpu.idle (Linux 5.15+) nor cpu.bvt_warp_ns");
    };
    let plan = decide(&CpuQosInput {
        strategy,
        pods: input.pods,
        paths: input.paths,
        mechanism,
    });
    writes.extend(plan.writes.iter().cloned());
    Report::Ran(plan)
}

/// The engine's core-scheduling step: which pods get a cookie.
pub fn engine_core_sched(input: &EngineInput<'_>) -> Report<CoreSchedPlan> {
    if let Some(r) = gate_off(input, "CoreSched") {
        return skipped(r);
    }
    let policy = input
        .node_slo
        .and_then(|s| s.resource_qos_strategy.as_ref())
        .and_then(|s| s.policies.as_ref())
        .and_then(|p| p.cpu_policy);
    if policy != Some(CpuQosPolicy::CoreSched) {
        return skipped("resourceQOSStrategy.policies.cpuPolicy is not coreSched");
    }
    Report::Ran(decide_core_sched(input.pods, input.paths))
}

#[cfg(test)]
#[path = "cpu_qos_tests.rs"]
mod tests;
