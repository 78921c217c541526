//! Pod mutation on CREATE: ClusterColocationProfiles, then the batch/mid resource rewrite, then
//! the extended-resource-spec annotation. One pure function; the server and the offline
//! `mutate` command both call it.

pub mod extended_spec;
pub mod profile;
pub mod resources;
pub mod strategic_merge;

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use koord_api::names::{LABEL_KOORDINATOR_PRIORITY, LABEL_QOS_CLASS};
use koord_api::priority::priority_class_with_default;
use serde::Serialize;

use crate::view::ClusterView;
use profile::{CompiledProfile, wins_draw};

/// Switches that change mutation for the whole cluster (feature-gate style).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MutationOptions {
    /// Never rewrite resources (upstream gate `ColocationProfileSkipMutatingResources`).
    pub skip_mutating_resources: bool,
    /// Write the extended-resource-spec annotation (upstream gate
    /// `DisableExtendedResourceSpec` turns it off).
    pub extended_resource_spec: bool,
}

impl Default for MutationOptions {
    fn default() -> Self {
        Self {
            skip_mutating_resources: false,
            extended_resource_spec: true,
        }
    }
}

/// What happened with one profile, for users asking why their profile did (not) apply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProfileOutcome {
    /// Profile name.
    pub name: String,
    /// Whether it changed the pod.
    pub applied: bool,
    /// Why (not).
    pub reason: String,
}

/// The result of mutating one pod.
#[derive(Debug, Clone)]
pub struct Mutation {
    /// The pod after every step.
    pub pod: Pod,
    /// JSONPatch from the submitted pod to `pod`.
    pub patch: json_patch::Patch,
    /// One outcome per profile, in name order.
    pub profiles: Vec<ProfileOutcome>,
}

/// Why a pod cannot be admitted as mutated.
#[derive(Debug, thiserror::Error)]
pub enum MutateError {
    /// The profile names a PriorityClass that does not exist. Admitting the pod without it
    /// would run it with the wrong priority, silently; the request is denied instead.
    #[error(
        "ClusterColocationProfile {profile}: spec.priorityClassName: PriorityClass {priority_class:?} does not exist; create it or fix the profile"
    )]
    MissingPriorityClass {
        /// Profile name.
        profile: String,
        /// The missing class.
        priority_class: String,
    },
    /// The profile's patch does not produce a valid Pod.
    #[error("ClusterColocationProfile {profile}: spec.patch: the patched pod is not a valid Pod: {reason}")]
    Patch {
        /// Profile name.
        profile: String,
        /// Decoding error.
        reason: String,
    },
    /// A resource quantity cannot be translated.
    #[error("batch resource translation: {0}")]
    Translate(#[from] resources::TranslateError),
    /// Encoding the pod failed.
    #[error("encoding the pod: {0}")]
    Encode(#[from] serde_json::Error),
}

/// Mutates `pod` (submitted in `namespace`) with the cluster's profiles. `roll` draws the
/// probability dice, a number in 0..100 per selected profile with a probability below 100.
pub fn mutate_pod(
    pod: &Pod,
    namespace: &str,
    view: &dyn ClusterView,
    options: MutationOptions,
    roll: &mut dyn FnMut() -> u32,
) -> Result<Mutation, MutateError> {
    let mut mutated = pod.clone();
    let mut profiles = view.profiles();
    profiles.sort_by(|a, b| a.name.cmp(&b.name));
    let namespace = pod
        .metadata
        .namespace
        .as_deref()
        .filter(|ns| !ns.is_empty())
        .unwrap_or(namespace);
    let namespace_labels = if profiles.is_empty() {
        None
    } else {
        view.namespace_labels(namespace)
    };
    let mut outcomes = Vec::with_capacity(profiles.len());
    let mut skip_resources = options.skip_mutating_resources;
    let empty = BTreeMap::new();
    for profile in &profiles {
        let pod_labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
        if let Err(reason) = profile.selects(pod_labels, namespace_labels.as_ref()) {
            outcomes.push(outcome(profile, false, reason.to_string()));
            continue;
        }
        skip_resources |= profile.skip_update_resources;
        let percent = match profile.probability() {
            Ok(percent) => percent,
            Err(error) => {
                outcomes.push(outcome(
                    profile,
                    false,
                    format!("invalid {error}; the profile never applies"),
                ));
                continue;
            }
        };
        if percent < 100 {
            let drawn = roll() % 100;
            if !wins_draw(percent, drawn) {
                outcomes.push(outcome(
                    profile,
                    false,
                    format!("selected, but lost the probability draw ({percent}%, drew {drawn})"),
                ));
                continue;
            }
        }
        apply_profile(&mut mutated, profile, view)?;
        outcomes.push(outcome(profile, true, "selected and applied".to_string()));
    }
    if !skip_resources {
        let priority = priority_class_with_default(&mutated);
        resources::translate(&mut mutated, priority)?;
    }
    if options.extended_resource_spec {
        extended_spec::annotate(&mut mutated)?;
    }
    let patch = json_patch::diff(&serde_json::to_value(pod)?, &serde_json::to_value(&mutated)?);
    Ok(Mutation {
        pod: mutated,
        patch,
        profiles: outcomes,
    })
}

fn outcome(profile: &CompiledProfile, applied: bool, reason: String) -> ProfileOutcome {
    ProfileOutcome {
        name: profile.name.clone(),
        applied,
        reason,
    }
}

/// Applies one selected profile, in upstream's order: labels, annotations, key mappings,
/// suffixes, schedulerName, qosClass, priorityClassName, koordinatorPriority, patch.
pub fn apply_profile(
    pod: &mut Pod,
    profile: &Arc<CompiledProfile>,
    view: &dyn ClusterView,
) -> Result<(), MutateError> {
    let spec = &profile.spec;
    let meta = &mut pod.metadata;
    if let Some(labels) = &spec.labels {
        meta.labels
            .get_or_insert_with(BTreeMap::new)
            .extend(labels.clone());
    }
    if let Some(annotations) = &spec.annotations {
        meta.annotations
            .get_or_insert_with(BTreeMap::new)
            .extend(annotations.clone());
    }
    if let Some(mapping) = &spec.label_keys_mapping {
        map_keys(meta.labels.get_or_insert_with(BTreeMap::new), mapping);
    }
    if let Some(mapping) = &spec.annotation_keys_mapping {
        map_keys(meta.annotations.get_or_insert_with(BTreeMap::new), mapping);
    }
    if let (Some(suffixes), Some(labels)) = (&spec.label_suffixes, meta.labels.as_mut()) {
        for (key, suffix) in suffixes {
            if let Some(value) = labels.get_mut(key) {
                value.push_str(suffix);
            }
        }
    }
    if let Some(scheduler) = spec.scheduler_name.as_ref().filter(|name| !name.is_empty()) {
        pod.spec.get_or_insert_with(Default::default).scheduler_name = Some(scheduler.clone());
    }
    if let Some(qos) = spec.qos_class.as_ref().filter(|qos| !qos.is_empty()) {
        pod.metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(LABEL_QOS_CLASS.to_string(), qos.clone());
    }
    if let Some(name) = spec.priority_class_name.as_ref().filter(|name| !name.is_empty()) {
        let class = view
            .priority_class(name)
            .ok_or_else(|| MutateError::MissingPriorityClass {
                profile: profile.name.clone(),
                priority_class: name.clone(),
            })?;
        let pod_spec = pod.spec.get_or_insert_with(Default::default);
        pod_spec.priority_class_name = Some(name.clone());
        pod_spec.priority = Some(class.value);
        pod_spec.preemption_policy = class.preemption_policy;
    }
    if let Some(priority) = spec.koordinator_priority {
        pod.metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(LABEL_KOORDINATOR_PRIORITY.to_string(), priority.to_string());
    }
    if let Some(patch) = &spec.patch {
        let mut value = serde_json::to_value(&*pod)?;
        strategic_merge::apply(&mut value, patch);
        *pod = serde_json::from_value(value).map_err(|error| MutateError::Patch {
            profile: profile.name.clone(),
            reason: error.to_string(),
        })?;
    }
    Ok(())
}

/// `map[new] = map[old]` for every mapping (empty string when `old` is missing), as upstream.
fn map_keys(map: &mut BTreeMap<String, String>, mapping: &BTreeMap<String, String>) {
    for (old, new) in mapping {
        let value = map.get(old).cloned().unwrap_or_default();
        map.insert(new.clone(), value);
    }
}

#[cfg(test)]
mod tests;
