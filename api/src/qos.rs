//! Koordinator QoS classes, the Kubernetes QoS class, and how a pod's class is resolved.
//!
//! The QoS class decides how koordlet treats a pod: BE pods are suppressed and evicted first,
//! LSR/LSE pods get exclusive CPUs, LS pods may burst. A pod states its class with the
//! `koordinator.sh/qosClass` label; without it, the Kubernetes QoS class stands in.

use std::fmt;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};

use crate::names::LABEL_QOS_CLASS;
use crate::quantity::{ExactQuantity, RESOURCE_CPU, RESOURCE_MEMORY, ResourceList};

/// A Koordinator QoS class, spelled on the wire as `LSE`, `LSR`, `LS`, `BE`, `SYSTEM`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum QoSClass {
    /// `LSE`: latency-sensitive exclusive, owns its CPUs outright.
    Lse,
    /// `LSR`: latency-sensitive reserved, bound to reserved CPUs.
    Lsr,
    /// `LS`: latency-sensitive, shares CPUs and may burst.
    Ls,
    /// `BE`: best effort, runs on reclaimed (batch) resources.
    Be,
    /// `SYSTEM`: node system components.
    System,
    /// No Koordinator QoS class (`""`).
    #[default]
    None,
}

impl QoSClass {
    /// The five named classes.
    pub const NAMED: [QoSClass; 5] = [
        QoSClass::Lse,
        QoSClass::Lsr,
        QoSClass::Ls,
        QoSClass::Be,
        QoSClass::System,
    ];

    /// The wire name; `""` for [`QoSClass::None`].
    pub fn name(self) -> &'static str {
        match self {
            QoSClass::Lse => "LSE",
            QoSClass::Lsr => "LSR",
            QoSClass::Ls => "LS",
            QoSClass::Be => "BE",
            QoSClass::System => "SYSTEM",
            QoSClass::None => "",
        }
    }

    /// The class with this exact wire name; anything else is None, as upstream.
    pub fn from_name(name: &str) -> QoSClass {
        Self::NAMED
            .into_iter()
            .find(|class| class.name() == name)
            .unwrap_or(QoSClass::None)
    }

    /// The class a Kubernetes QoS class stands for: Guaranteed is LSR, Burstable LS,
    /// BestEffort BE.
    pub fn from_kube_qos(kube: KubeQoSClass) -> QoSClass {
        match kube {
            KubeQoSClass::Guaranteed => QoSClass::Lsr,
            KubeQoSClass::Burstable => QoSClass::Ls,
            KubeQoSClass::BestEffort => QoSClass::Be,
        }
    }

    /// This class (a pod's label), or, when it is None, the class of the pod's Kubernetes QoS
    /// (asked only then): how every consumer resolves a pod's class, whether it has the pod
    /// (`qos_class_with_default`) or only its labels and cgroup (the runtime hooks).
    pub fn or_kube_qos(self, kube: impl FnOnce() -> Option<KubeQoSClass>) -> QoSClass {
        match self {
            QoSClass::None => kube().map_or(QoSClass::None, QoSClass::from_kube_qos),
            class => class,
        }
    }
}

impl fmt::Display for QoSClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The Kubernetes pod QoS class (`status.qosClass`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KubeQoSClass {
    /// Every container has equal, non-zero CPU and memory requests and limits.
    Guaranteed,
    /// Some request or limit, but not Guaranteed.
    Burstable,
    /// No CPU or memory request or limit anywhere.
    BestEffort,
}

impl KubeQoSClass {
    /// The wire name (`Guaranteed`, `Burstable`, `BestEffort`).
    pub fn name(self) -> &'static str {
        match self {
            KubeQoSClass::Guaranteed => "Guaranteed",
            KubeQoSClass::Burstable => "Burstable",
            KubeQoSClass::BestEffort => "BestEffort",
        }
    }

    /// The class with this wire name, if it is one.
    pub fn from_name(name: &str) -> Option<KubeQoSClass> {
        [
            KubeQoSClass::Guaranteed,
            KubeQoSClass::Burstable,
            KubeQoSClass::BestEffort,
        ]
        .into_iter()
        .find(|class| class.name() == name)
    }
}

/// The class the pod's `koordinator.sh/qosClass` label names; None without the label or for an
/// unknown value.
pub fn qos_class_raw(pod: &Pod) -> QoSClass {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(LABEL_QOS_CLASS))
        .map_or(QoSClass::None, |value| QoSClass::from_name(value))
}

/// The Kubernetes QoS class: `status.qosClass` when set (None if it holds an unknown value),
/// else computed from the spec as the kubelet does.
pub fn kube_qos_class(pod: &Pod) -> Option<KubeQoSClass> {
    match pod.status.as_ref().and_then(|status| status.qos_class.as_deref()) {
        Some(reported) if !reported.is_empty() => KubeQoSClass::from_name(reported),
        _ => Some(
            pod.spec
                .as_ref()
                .map_or(KubeQoSClass::BestEffort, compute_kube_qos_class),
        ),
    }
}

/// The class a pod is treated as: its label, else the Kubernetes QoS mapped to LSR/LS/BE.
pub fn qos_class_with_default(pod: &Pod) -> QoSClass {
    qos_class_raw(pod).or_kube_qos(|| kube_qos_class(pod))
}

/// Running totals of positive CPU and memory amounts, for the QoS computation.
#[derive(Default)]
struct CpuMemory {
    cpu: Option<ExactQuantity>,
    memory: Option<ExactQuantity>,
}

impl CpuMemory {
    fn slot(&mut self, resource: &str) -> Option<&mut Option<ExactQuantity>> {
        match resource {
            RESOURCE_CPU => Some(&mut self.cpu),
            RESOURCE_MEMORY => Some(&mut self.memory),
            _ => None,
        }
    }

    /// Adds the positive cpu/memory entries of `list`; returns which of (cpu, memory) were present.
    /// Unparsable quantities count as absent (the API server never stores one).
    fn add_positive(&mut self, list: Option<&ResourceList>) -> (bool, bool) {
        let mut found = (false, false);
        for (resource, quantity) in list.into_iter().flatten() {
            let Ok(amount) = ExactQuantity::from_k8s(quantity) else {
                continue;
            };
            if amount.nanos() <= 0 {
                continue;
            }
            if let Some(slot) = self.slot(resource) {
                // Saturating is fine: a sum above 2^63-1 units only has to stay unequal.
                let sum = slot.map_or(amount, |prev| prev.checked_add(amount).unwrap_or(prev));
                *slot = Some(sum);
                if resource == RESOURCE_CPU {
                    found.0 = true;
                } else {
                    found.1 = true;
                }
            }
        }
        found
    }

    fn count(&self) -> usize {
        usize::from(self.cpu.is_some()) + usize::from(self.memory.is_some())
    }
}

/// The Kubernetes QoS class of a pod spec, computed as the kubelet's `ComputePodQOS` does:
/// only CPU and memory count, only positive amounts count, init containers count like
/// containers, and pod-level `resources` (when set) replace the containers. Guaranteed needs a
/// CPU and a memory limit on every container (or on the pod) and requests equal to limits.
pub fn compute_kube_qos_class(spec: &PodSpec) -> KubeQoSClass {
    let mut requests = CpuMemory::default();
    let mut limits = CpuMemory::default();
    let mut guaranteed = true;
    let mut account = |resources: Option<&ResourceRequirements>, require_limits: bool| {
        requests.add_positive(resources.and_then(|r| r.requests.as_ref()));
        let (cpu_limit, memory_limit) = limits.add_positive(resources.and_then(|r| r.limits.as_ref()));
        if require_limits && !(cpu_limit && memory_limit) {
            guaranteed = false;
        }
    };
    match spec.resources.as_ref() {
        Some(pod_level) => {
            let has_limits = pod_level.limits.as_ref().is_some_and(|l| !l.is_empty());
            account(Some(pod_level), has_limits);
        }
        None => {
            let containers: Vec<&Container> = spec
                .containers
                .iter()
                .chain(spec.init_containers.iter().flatten())
                .collect();
            for container in containers {
                account(container.resources.as_ref(), true);
            }
        }
    }
    if requests.count() == 0 && limits.count() == 0 {
        return KubeQoSClass::BestEffort;
    }
    let requests_match_limits = (requests.cpu.is_none() || requests.cpu == limits.cpu)
        && (requests.memory.is_none() || requests.memory == limits.memory);
    if guaranteed && requests_match_limits && requests.count() == limits.count() {
        KubeQoSClass::Guaranteed
    } else {
        KubeQoSClass::Burstable
    }
}

#[cfg(test)]
mod tests;
