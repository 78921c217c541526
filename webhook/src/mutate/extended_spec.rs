//! The `node.koordinator.sh/extended-resource-spec` annotation: each container's batch
//! requests and limits in one place, which koordlet reads to size BE cgroups without parsing
//! every container again.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use koord_api::names::{ANNOTATION_EXTENDED_RESOURCE_SPEC, RESOURCE_BATCH_CPU, RESOURCE_BATCH_MEMORY};
use koord_api::quantity::ResourceList;
use serde::{Deserialize, Serialize};

/// The annotation's JSON shape (upstream `ExtendedResourceSpec`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExtendedResourceSpec {
    /// Container name -> its batch requests and limits.
    #[serde(default)]
    pub containers: BTreeMap<String, ExtendedResourceContainerSpec>,
}

/// One container's batch resources.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExtendedResourceContainerSpec {
    /// Batch limits.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub limits: ResourceList,
    /// Batch requests.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub requests: ResourceList,
}

/// Computes the spec from the pod's (regular) containers; init containers and overhead are
/// not counted, as upstream. `None` when no container uses batch resources.
pub fn extended_resource_spec(pod: &Pod) -> Option<ExtendedResourceSpec> {
    let pick = |list: Option<&ResourceList>| -> ResourceList {
        list.into_iter()
            .flatten()
            .filter(|(name, _)| *name == RESOURCE_BATCH_CPU || *name == RESOURCE_BATCH_MEMORY)
            .map(|(name, quantity)| (name.clone(), quantity.clone()))
            .collect()
    };
    let containers: BTreeMap<_, _> = pod
        .spec
        .iter()
        .flat_map(|spec| spec.containers.iter())
        .filter_map(|container| {
            let resources = container.resources.as_ref()?;
            let entry = ExtendedResourceContainerSpec {
                requests: pick(resources.requests.as_ref()),
                limits: pick(resources.limits.as_ref()),
            };
            (!entry.requests.is_empty() || !entry.limits.is_empty()).then(|| (container.name.clone(), entry))
        })
        .collect();
    (!containers.is_empty()).then_some(ExtendedResourceSpec { containers })
}

/// Writes the annotation when the pod uses batch resources; returns whether it changed.
pub fn annotate(pod: &mut Pod) -> Result<bool, serde_json::Error> {
    let Some(spec) = extended_resource_spec(pod) else {
        return Ok(false);
    };
    let value = serde_json::to_string(&spec)?;
    let annotations = pod.metadata.annotations.get_or_insert_with(BTreeMap::new);
    if annotations.get(ANNOTATION_EXTENDED_RESOURCE_SPEC) == Some(&value) {
        return Ok(false);
    }
    annotations.insert(ANNOTATION_EXTENDED_RESOURCE_SPEC.to_string(), value);
    Ok(true)
}
