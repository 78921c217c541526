//! Translating a batch or mid pod's cpu and memory into the reclaimed resources it actually
//! runs on (`kubernetes.io/batch-cpu`, `kubernetes.io/batch-memory`, or the mid pair), so the
//! scheduler accounts it against the node's reclaimed capacity instead of its real one.

use k8s_openapi::api::core::v1::{Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use koord_api::PriorityClass;
use koord_api::names::{RESOURCE_BATCH_CPU, RESOURCE_BATCH_MEMORY, RESOURCE_MID_CPU, RESOURCE_MID_MEMORY};
use koord_api::quantity::{ExactQuantity, RESOURCE_CPU, RESOURCE_MEMORY, ResourceList};

/// A quantity that cannot be translated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct TranslateError {
    /// Where the quantity sits, e.g. `spec.containers[0].resources.requests.cpu`.
    pub field: String,
    /// What is wrong with it.
    pub reason: String,
}

/// The reclaimed (cpu, memory) resource names for a priority class; `None` when its pods run on
/// regular resources (Prod, None) or have no mapping (Free).
pub fn reclaimed_names(priority: PriorityClass) -> Option<(&'static str, &'static str)> {
    match priority {
        PriorityClass::Batch => Some((RESOURCE_BATCH_CPU, RESOURCE_BATCH_MEMORY)),
        PriorityClass::Mid => Some((RESOURCE_MID_CPU, RESOURCE_MID_MEMORY)),
        PriorityClass::Prod | PriorityClass::Free | PriorityClass::None => None,
    }
}

/// Rewrites requests and limits of every init container and container, and the pod overhead:
/// cpu becomes the reclaimed cpu as an integer of milli-cores (`500m` -> `500`), memory is
/// moved as is; a reclaimed limit without a request also becomes the request. Returns whether
/// anything changed.
pub fn translate(pod: &mut Pod, priority: PriorityClass) -> Result<bool, TranslateError> {
    let Some((cpu_name, memory_name)) = reclaimed_names(priority) else {
        return Ok(false);
    };
    let Some(spec) = pod.spec.as_mut() else {
        return Ok(false);
    };
    let mut changed = false;
    let groups = [
        (
            "initContainers",
            spec.init_containers.iter_mut().flatten().collect::<Vec<_>>(),
        ),
        ("containers", spec.containers.iter_mut().collect()),
    ];
    for (group, containers) in groups {
        for (index, container) in containers.into_iter().enumerate() {
            if let Some(resources) = container.resources.as_mut() {
                let field = format!("spec.{group}[{index}].resources");
                changed |= translate_requirements(resources, cpu_name, memory_name, &field)?;
            }
        }
    }
    if let Some(overhead) = spec.overhead.as_mut() {
        changed |= translate_list(overhead, cpu_name, memory_name, "spec.overhead")?;
    }
    Ok(changed)
}

fn translate_requirements(
    resources: &mut ResourceRequirements,
    cpu_name: &str,
    memory_name: &str,
    field: &str,
) -> Result<bool, TranslateError> {
    let mut changed = false;
    if let Some(requests) = resources.requests.as_mut() {
        changed |= translate_list(requests, cpu_name, memory_name, &format!("{field}.requests"))?;
    }
    if let Some(limits) = resources.limits.as_mut() {
        changed |= translate_list(limits, cpu_name, memory_name, &format!("{field}.limits"))?;
        for name in [cpu_name, memory_name] {
            if let Some(limit) = limits.get(name) {
                let requests = resources.requests.get_or_insert_with(ResourceList::new);
                if !requests.contains_key(name) {
                    requests.insert(name.to_string(), limit.clone());
                    changed = true;
                }
            }
        }
    }
    Ok(changed)
}

fn translate_list(
    list: &mut ResourceList,
    cpu_name: &str,
    memory_name: &str,
    field: &str,
) -> Result<bool, TranslateError> {
    let mut changed = false;
    if let Some(cpu) = list.remove(RESOURCE_CPU) {
        let milli = ExactQuantity::from_k8s(&cpu)
            .and_then(ExactQuantity::milli_value)
            .map_err(|error| TranslateError {
                field: format!("{field}.cpu"),
                reason: error.to_string(),
            })?;
        list.insert(cpu_name.to_string(), Quantity(milli.to_string()));
        changed = true;
    }
    if let Some(memory) = list.remove(RESOURCE_MEMORY) {
        list.insert(memory_name.to_string(), memory);
        changed = true;
    }
    Ok(changed)
}
