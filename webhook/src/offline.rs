//! `koord-webhook mutate` and `koord-webhook validate`: the server's decisions on objects from
//! a file, for users asking "why did my profile not apply?" or checking a ConfigMap before
//! `kubectl apply`.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use rand::{Rng, SeedableRng};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::cli::OutputFormat;
use crate::mutate::profile::CompiledProfile;
use crate::mutate::{MutationOptions, mutate_pod};
use crate::validate::Violation;
use crate::validate::configmap::validate_slo_config_with_nodes;
use crate::validate::pod::{PodValidationOptions, validate_pod};
use crate::validate::profile::validate_profile;
use crate::view::{PriorityClassInfo, StaticView};

/// Why an offline command could not run (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum OfflineError {
    /// The file (or stdin) could not be read.
    #[error(transparent)]
    Read(#[from] koord_runtime::ReadInputError),
    /// A document is not YAML, or not the kind of object it claims to be.
    #[error("document {index}: {reason}")]
    Document {
        /// 1-based position in the file.
        index: usize,
        /// What is wrong.
        reason: String,
    },
    /// The input does not hold what the command needs.
    #[error("{0}")]
    Input(String),
    /// The webhook would deny the pod (`mutate` exits 1, as `validate` does on a violation).
    #[error("the pod would be denied: {0}")]
    Denied(String),
}

impl OfflineError {
    /// The exit code of an offline command that failed this way: 1 when the webhook would
    /// refuse the object, 2 when the input could not be used.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Denied(_) => 1,
            Self::Read(_) | Self::Document { .. } | Self::Input(_) => 2,
        }
    }
}

/// Reads a file or stdin (`-`).
pub fn read_input(path: &str) -> Result<String, OfflineError> {
    Ok(koord_runtime::read_file_or_stdin(path)?)
}

/// Splits multi-document YAML into JSON values (empty documents skipped), with 1-based positions.
///
/// A key given twice in one mapping is an error, not "the last one wins": two files
/// concatenated without a `---` between them (`cat profile.yaml pod.yaml | ... -f -`) read as
/// one document whose second `kind:` would silently replace the first.
pub fn documents(text: &str) -> Result<Vec<(usize, Value)>, OfflineError> {
    let mut out = Vec::new();
    for (index, document) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let not_yaml = |error: &dyn std::fmt::Display| OfflineError::Document {
            index: index + 1,
            reason: format!("not YAML: {error}"),
        };
        let yaml = serde_yaml::Value::deserialize(document).map_err(|error| not_yaml(&error))?;
        let value = serde_json::to_value(&yaml).map_err(|error| not_yaml(&error))?;
        if !value.is_null() {
            out.push((index + 1, value));
        }
    }
    Ok(out)
}

fn kind(value: &Value) -> &str {
    value.get("kind").and_then(Value::as_str).unwrap_or_default()
}

fn typed<T: serde::de::DeserializeOwned>(index: usize, value: &Value) -> Result<T, OfflineError> {
    T::deserialize(value).map_err(|error| OfflineError::Document {
        index,
        reason: format!("not a valid {}: {error}", kind(value)),
    })
}

/// `mutate`: returns the JSON to print.
pub fn run_mutate(text: &str, seed: Option<u64>, default_namespace: &str) -> Result<Value, OfflineError> {
    let mut view = StaticView::with_koordinator_priority_classes();
    let mut pods = Vec::new();
    for (index, value) in documents(text)? {
        match kind(&value) {
            "Pod" => pods.push(typed::<Pod>(index, &value)?),
            "ClusterColocationProfile" => {
                let profile = CompiledProfile::from_json(&value).map_err(|error| OfflineError::Document {
                    index,
                    reason: error.to_string(),
                })?;
                view.profiles.push(Arc::new(profile));
            }
            "Namespace" => {
                let namespace: k8s_openapi::api::core::v1::Namespace = typed(index, &value)?;
                view.namespaces.insert(
                    namespace.metadata.name.unwrap_or_default(),
                    namespace.metadata.labels.unwrap_or_default(),
                );
            }
            "PriorityClass" => {
                let class: k8s_openapi::api::scheduling::v1::PriorityClass = typed(index, &value)?;
                view.priority_classes.insert(
                    class.metadata.name.unwrap_or_default(),
                    PriorityClassInfo {
                        value: class.value,
                        preemption_policy: class.preemption_policy,
                    },
                );
            }
            other => {
                return Err(OfflineError::Document {
                    index,
                    reason: format!(
                        "kind {other:?} is not one of Pod, ClusterColocationProfile, Namespace, PriorityClass"
                    ),
                });
            }
        }
    }
    let [pod] = <[Pod; 1]>::try_from(pods)
        .map_err(|pods| OfflineError::Input(format!("expected exactly one Pod, found {}", pods.len())))?;
    let mut rng = match seed {
        Some(seed) => rand::rngs::StdRng::seed_from_u64(seed),
        None => rand::rngs::StdRng::from_rng(&mut rand::rng()),
    };
    let mut roll = || rng.random_range(0..100u32);
    let mutation = mutate_pod(
        &pod,
        default_namespace,
        &view,
        MutationOptions::default(),
        &mut roll,
    )
    .map_err(|error| OfflineError::Denied(error.to_string()))?;
    Ok(json!({
        "pod": mutation.pod,
        "patch": mutation.patch,
        "profiles": mutation.profiles,
    }))
}

/// One violation found offline, with the document it is in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocumentViolation {
    /// 1-based position of the document in the input.
    pub index: usize,
    /// The document's `kind`.
    pub kind: String,
    /// The document's `metadata.name` (empty when it has none).
    pub name: String,
    /// The violation.
    pub violation: Violation,
}

impl DocumentViolation {
    /// The JSON object `validate --output json` prints for this violation. Its keys are a
    /// stable interface for CI scripts: `document` (1-based position), `kind`, `name`, `field`,
    /// `rule`, and `message` (the line the text output prints).
    pub fn to_json(&self) -> Value {
        json!({
            "document": self.index,
            "kind": self.kind,
            "name": self.name,
            "field": self.violation.field,
            "rule": self.violation.rule,
            "message": self.to_string(),
        })
    }
}

impl std::fmt::Display for DocumentViolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "document {} ({} {}), {}, {}",
            self.index, self.kind, self.name, self.violation.field, self.violation.rule
        )
    }
}

/// What `validate` prints for the violations it found in `format`.
pub fn format_violations(violations: &[DocumentViolation], format: OutputFormat) -> String {
    match format {
        OutputFormat::Json => {
            Value::Array(violations.iter().map(DocumentViolation::to_json).collect()).to_string()
        }
        OutputFormat::Text => {
            let lines: Vec<String> = violations.iter().map(ToString::to_string).collect();
            lines.join("\n")
        }
    }
}

/// `validate`: every violation in the file.
pub fn run_validate(
    text: &str,
    config_namespace: &str,
    slo_config_name: &str,
) -> Result<Vec<DocumentViolation>, OfflineError> {
    let docs = documents(text)?;
    let mut nodes = BTreeMap::new();
    for (index, value) in &docs {
        if kind(value) == "Node" {
            let node: k8s_openapi::api::core::v1::Node = typed(*index, value)?;
            nodes.insert(
                node.metadata.name.unwrap_or_default(),
                node.metadata.labels.unwrap_or_default(),
            );
        }
    }
    let mut found = Vec::new();
    for (index, value) in &docs {
        let name = value
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let violations = match kind(value) {
            "ConfigMap" => {
                let config_map: ConfigMap = typed(*index, value)?;
                let namespace = config_map
                    .metadata
                    .namespace
                    .as_deref()
                    .unwrap_or(config_namespace);
                if name == slo_config_name && namespace == config_namespace {
                    validate_slo_config_with_nodes(&config_map.data.unwrap_or_default(), &nodes)
                } else {
                    Vec::new()
                }
            }
            "ClusterColocationProfile" => validate_profile(value),
            "Pod" => validate_pod(
                &typed::<Pod>(*index, value)?,
                None,
                PodValidationOptions::default(),
            ),
            _ => Vec::new(),
        };
        found.extend(violations.into_iter().map(|violation| DocumentViolation {
            index: *index,
            kind: kind(value).to_owned(),
            name: name.to_owned(),
            violation,
        }));
    }
    Ok(found)
}
