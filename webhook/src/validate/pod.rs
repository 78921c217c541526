//! Pod rules (upstream's ClusterColocationProfile validating webhook, on by default here).

use k8s_openapi::api::core::v1::Pod;
use koord_api::PriorityClass;
use koord_api::QoSClass;
use koord_api::names::{
    LABEL_KOORDINATOR_PRIORITY, LABEL_QOS_CLASS, RESOURCE_BATCH_CPU, RESOURCE_BATCH_MEMORY,
};
use koord_api::priority::priority_class_raw;
use koord_api::qos::qos_class_raw;
use koord_api::quantity::{ExactQuantity, RESOURCE_CPU, ResourceList};

use super::Violation;

/// Switches for pod validation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PodValidationOptions {
    /// Allow changing label `koordinator.sh/priority` on UPDATE (upstream gate
    /// `ColocationProfileSkipValidatingPriority`).
    pub allow_priority_label_update: bool,
}

/// Checks a pod on CREATE (`old == None`) or UPDATE.
pub fn validate_pod(pod: &Pod, old: Option<&Pod>, options: PodValidationOptions) -> Vec<Violation> {
    let mut violations = Vec::new();
    if let Some(old) = old {
        immutable_fields(pod, old, options, &mut violations);
    }
    let qos = qos_class_raw(pod);
    let priority = effective_priority_raw(pod);
    let requests = pod_cpu_and_batch_requests(pod, &mut violations);
    for batch in [RESOURCE_BATCH_CPU, RESOURCE_BATCH_MEMORY] {
        if requests.batch.contains(&batch) && qos != QoSClass::Be {
            violations.push(Violation::new(
                format!("metadata.labels[{LABEL_QOS_CLASS}]"),
                format!(
                    "is {:?} but a pod requesting {batch} (koordinator colocation resources) must have QoS BE",
                    qos.name()
                ),
            ));
            break;
        }
    }
    let forbidden = match qos {
        QoSClass::Be => matches!(priority, PriorityClass::None | PriorityClass::Prod),
        QoSClass::Lsr => !matches!(priority, PriorityClass::Prod),
        _ => false,
    };
    if forbidden {
        violations.push(Violation::new(
            "spec.priority",
            format!(
                "QoS {} cannot be used in combination with priority class {:?}{}",
                qos.name(),
                priority.name(),
                if qos == QoSClass::Be {
                    " (BE pods need koord-batch, koord-mid or koord-free)"
                } else {
                    " (LSR pods need koord-prod)"
                }
            ),
        ));
    }
    if matches!(qos, QoSClass::Lsr | QoSClass::Lse) {
        let milli = requests.cpu_milli;
        if milli <= 0 || milli % 1000 != 0 {
            violations.push(Violation::new(
                "spec.containers[*].resources.requests.cpu",
                format!(
                    "QoS {} needs a non-zero whole number of CPUs, the pod requests {milli}m",
                    qos.name()
                ),
            ));
        }
    }
    violations
}

fn immutable_fields(pod: &Pod, old: &Pod, options: PodValidationOptions, violations: &mut Vec<Violation>) {
    let label = |pod: &Pod, key: &str| {
        pod.metadata
            .labels
            .as_ref()
            .and_then(|labels| labels.get(key))
            .cloned()
    };
    let mut keys = vec![LABEL_QOS_CLASS];
    if !options.allow_priority_label_update {
        keys.push(LABEL_KOORDINATOR_PRIORITY);
    }
    for key in keys {
        let (before, after) = (label(old, key), label(pod, key));
        if before != after {
            violations.push(Violation::new(
                format!("metadata.labels[{key}]"),
                format!("is immutable: {before:?} cannot change to {after:?}"),
            ));
        }
    }
    let (before, after) = (effective_priority_raw(old), effective_priority_raw(pod));
    if before != after {
        violations.push(Violation::new(
            "spec.priority",
            format!(
                "the Koordinator priority class is immutable: {:?} cannot change to {:?}",
                before.name(),
                after.name()
            ),
        ));
    }
}

/// `PriorityClassRaw`, except that a pod with only `priorityClassName` set (the API server's
/// Priority admission plugin has not filled `spec.priority`, as in a manifest checked offline)
/// is judged by the class it names.
pub fn effective_priority_raw(pod: &Pod) -> PriorityClass {
    let has_label = pod
        .metadata
        .labels
        .as_ref()
        .is_some_and(|labels| labels.contains_key(koord_api::names::LABEL_PRIORITY_CLASS));
    match pod.spec.as_ref() {
        Some(spec) if !has_label && spec.priority.is_none() => spec
            .priority_class_name
            .as_deref()
            .map_or(PriorityClass::None, PriorityClass::from_name),
        _ => priority_class_raw(pod),
    }
}

struct PodRequests {
    cpu_milli: i64,
    batch: Vec<&'static str>,
}

/// The pod's effective CPU request (max of the containers' sum and each init container, plus
/// overhead, as the scheduler counts it) and which batch resources it requests.
fn pod_cpu_and_batch_requests(pod: &Pod, violations: &mut Vec<Violation>) -> PodRequests {
    let mut batch = Vec::new();
    let Some(spec) = pod.spec.as_ref() else {
        return PodRequests { cpu_milli: 0, batch };
    };
    let mut cpu = |list: Option<&ResourceList>, field: String| -> i64 {
        let Some(list) = list else { return 0 };
        for name in [RESOURCE_BATCH_CPU, RESOURCE_BATCH_MEMORY] {
            if list.contains_key(name) && !batch.contains(&name) {
                batch.push(name);
            }
        }
        match list
            .get(RESOURCE_CPU)
            .map(|q| ExactQuantity::from_k8s(q).and_then(ExactQuantity::milli_value))
        {
            None => 0,
            Some(Ok(milli)) => milli,
            Some(Err(error)) => {
                violations.push(Violation::new(format!("{field}.cpu"), error.to_string()));
                0
            }
        }
    };
    let mut sum: i64 = 0;
    for (index, container) in spec.containers.iter().enumerate() {
        let milli = cpu(
            container.resources.as_ref().and_then(|r| r.requests.as_ref()),
            format!("spec.containers[{index}].resources.requests"),
        );
        sum = sum.saturating_add(milli);
    }
    let mut effective = sum;
    for (index, container) in spec.init_containers.iter().flatten().enumerate() {
        let milli = cpu(
            container.resources.as_ref().and_then(|r| r.requests.as_ref()),
            format!("spec.initContainers[{index}].resources.requests"),
        );
        effective = effective.max(milli);
    }
    effective = effective.saturating_add(cpu(spec.overhead.as_ref(), "spec.overhead".to_string()));
    PodRequests {
        cpu_milli: effective,
        batch,
    }
}

#[cfg(test)]
#[path = "pod_tests.rs"]
mod tests;
