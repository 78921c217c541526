//! Validation entry points for callers outside the ConfigMap parse: the admission webhook
//! (node-entry facts upstream's webhook rejects), koordlet (a received NodeSLO, a pod's burst
//! annotation) and property tests (effective per-node strategies stay valid).

use super::ConfigKey;
use super::check::Check;
use super::colocation::ColocationStrategy;
use super::error::{ConfigError, Rule};
use super::layer::Layered;
use super::validate::{burst, burst_config, colocation, host_applications, system, threshold};
use crate::nodeslo::{CpuBurstConfig, NodeSLOSpec};
use crate::selector::{SelectorOverlap, find_overlaps, is_empty_selector};

/// Validates a pod's burst config (e.g. from the `koordinator.sh/cpuBurst` annotation).
pub fn validate_cpu_burst_config(cfg: &CpuBurstConfig) -> Vec<ConfigError> {
    let mut errors = Vec::new();
    burst_config(
        cfg,
        &mut Check {
            key: ConfigKey::CpuBurst,
            base: String::new(),
            errors: &mut errors,
        },
    );
    errors
}

/// Validates a NodeSLO spec with the ConfigMap rules of each part (koordlet may check what it
/// receives; tests check that merging never leaves the valid range). Paths start at the part.
pub fn validate_node_slo_spec(spec: &NodeSLOSpec) -> Vec<ConfigError> {
    let mut errors = Vec::new();
    if let Some(s) = &spec.resource_used_threshold_with_be {
        threshold(
            s,
            &mut Check {
                key: ConfigKey::ResourceThreshold,
                base: "resourceUsedThresholdWithBE".to_owned(),
                errors: &mut errors,
            },
        );
    }
    if let Some(s) = &spec.resource_qos_strategy {
        super::validate_qos::resource_qos(
            s,
            &mut Check {
                key: ConfigKey::ResourceQos,
                base: "resourceQOSStrategy".to_owned(),
                errors: &mut errors,
            },
        );
    }
    if let Some(s) = &spec.cpu_burst_strategy {
        burst(
            s,
            &mut Check {
                key: ConfigKey::CpuBurst,
                base: "cpuBurstStrategy".to_owned(),
                errors: &mut errors,
            },
            None,
        );
    }
    if let Some(s) = &spec.system_strategy {
        system(
            s,
            &mut Check {
                key: ConfigKey::System,
                base: "systemStrategy".to_owned(),
                errors: &mut errors,
            },
        );
    }
    if let Some(apps) = &spec.host_applications {
        host_applications(
            apps,
            &mut Check {
                key: ConfigKey::HostApplication,
                base: "hostApplications".to_owned(),
                errors: &mut errors,
            },
        );
    }
    errors
}

/// Validates one colocation strategy (e.g. a node's effective one) with the ConfigMap rules.
pub fn validate_colocation_strategy(s: &ColocationStrategy) -> Vec<ConfigError> {
    let mut errors = Vec::new();
    colocation(
        s,
        &mut Check {
            key: ConfigKey::Colocation,
            base: String::new(),
            errors: &mut errors,
        },
    );
    errors
}

/// Problems of node entries that only the admission webhook rejects (the manager tolerates
/// them with upstream's semantics): an entry without a selector or with an empty one, and
/// entries whose selectors can select the same node (the later one would be shadowed).
pub fn node_entry_problems<S>(key: ConfigKey, l: &Layered<S>) -> (Vec<ConfigError>, Vec<SelectorOverlap>) {
    let mut errors = Vec::new();
    for entry in &l.nodes {
        if entry.node_selector.as_ref().is_none_or(is_empty_selector) {
            let path = format!("{}[{}].nodeSelector", key.nodes_field(), entry.index);
            errors.push(ConfigError::new(key, path, Rule::EmptySelector));
        }
    }
    (errors, find_overlaps(&l.selectors()))
}

/// With upstream's `--node-strategy-name-need-check=true` the webhook also requires every node
/// entry to carry a unique, non-empty `name`; this gives those errors.
pub fn node_entry_name_errors<S>(key: ConfigKey, l: &Layered<S>) -> Vec<ConfigError> {
    let mut errors = Vec::new();
    let mut seen: Vec<(&str, usize)> = Vec::new();
    for entry in &l.nodes {
        let path = format!("{}[{}].name", key.nodes_field(), entry.index);
        match entry.name.as_deref() {
            None | Some("") => errors.push(ConfigError::new(key, path, Rule::NameMissing)),
            Some(name) => match seen.iter().find(|(n, _)| *n == name) {
                Some((_, first)) => errors.push(ConfigError::new(
                    key,
                    path,
                    Rule::NameDuplicate {
                        name: name.to_owned(),
                        first: *first,
                    },
                )),
                None => seen.push((name, entry.index)),
            },
        }
    }
    errors
}
