//! ClusterColocationProfiles, compiled once per version and applied to pods.
//!
//! A profile is read from its wire form (any object with `metadata` and `spec` in the
//! `config.koordinator.sh/v1alpha1` shape) and its selectors and probability are parsed up
//! front, so a request only evaluates pre-parsed requirements.
//!
//! Two upstream behaviours are fixed here on purpose:
//! - an invalid selector is a **non-match** (upstream counts it as a match) and the profile's
//!   outcome says why;
//! - `probability: p` applies with chance exactly p% (upstream draws `rand.Intn(100) > p` and so
//!   applies with chance (p+1)%).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::Deserialize;

use koord_api::names::ANNOTATION_SKIP_UPDATE_RESOURCES;
use koord_api::selector::Selector;

/// The profile spec as the api crate defines it (upstream JSON names).
pub use koord_api::profile::ClusterColocationProfileSpec as ProfileSpec;

/// The wire object: only what the webhook reads.
#[derive(Debug, Clone, Deserialize)]
struct ProfileObject {
    #[serde(default)]
    metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    #[serde(default)]
    spec: ProfileSpec,
}

/// Why a profile does not select a pod (the reason in the mutation's explanation).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotSelected {
    /// One of the profile's selectors does not parse: it never matches.
    #[error("invalid {0}; the profile never matches")]
    InvalidSelector(#[source] ProfileError),
    /// The profile has a namespaceSelector and the pod's Namespace is not known.
    #[error("the pod's Namespace is unknown, so spec.namespaceSelector cannot match")]
    NamespaceUnknown,
    /// The namespaceSelector does not match.
    #[error("spec.namespaceSelector does not match the Namespace labels")]
    Namespace,
    /// The selector does not match the pod's labels.
    #[error("spec.selector does not match the pod labels")]
    Pod,
}

/// Why a profile cannot be used as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProfileError {
    /// The object is not a ClusterColocationProfile.
    #[error("not a ClusterColocationProfile: {0}")]
    Shape(String),
    /// A selector does not parse.
    #[error("spec.{field}: {reason}")]
    Selector {
        /// `namespaceSelector` or `selector`.
        field: &'static str,
        /// The parse error.
        reason: String,
    },
    /// The probability is not an integer or a percentage between 0 and 100.
    #[error("spec.probability: {0}")]
    Probability(String),
}

/// A profile ready to be matched: selectors parsed, probability resolved.
#[derive(Debug, Clone)]
pub struct CompiledProfile {
    /// The profile's name (application order is by name).
    pub name: String,
    /// Whether the profile carries `config.koordinator.sh/skip-update-resources`.
    pub skip_update_resources: bool,
    /// The spec as written.
    pub spec: ProfileSpec,
    namespace_selector: Result<Option<Selector>, ProfileError>,
    selector: Result<Option<Selector>, ProfileError>,
    probability: Result<u32, ProfileError>,
}

impl CompiledProfile {
    /// Compiles a profile from its JSON form. Only a wrong overall shape is an error; bad
    /// selectors and probabilities are kept and make the profile never apply, with the reason.
    pub fn from_json(object: &serde_json::Value) -> Result<Self, ProfileError> {
        let object =
            ProfileObject::deserialize(object).map_err(|error| ProfileError::Shape(error.to_string()))?;
        Ok(Self::compile(
            object.metadata.name.unwrap_or_default(),
            object.metadata.annotations.unwrap_or_default(),
            object.spec,
        ))
    }

    /// Compiles a profile from its parts.
    pub fn compile(name: String, annotations: BTreeMap<String, String>, spec: ProfileSpec) -> Self {
        Self {
            name,
            skip_update_resources: annotations.contains_key(ANNOTATION_SKIP_UPDATE_RESOURCES),
            namespace_selector: parse_selector("namespaceSelector", spec.namespace_selector.as_ref()),
            selector: parse_selector("selector", spec.selector.as_ref()),
            probability: probability_percent(&spec),
            spec,
        }
    }

    /// Every problem that makes the profile unusable (for validation).
    pub fn problems(&self) -> Vec<ProfileError> {
        [
            self.namespace_selector.as_ref().err(),
            self.selector.as_ref().err(),
            self.probability.as_ref().err(),
        ]
        .into_iter()
        .flatten()
        .cloned()
        .collect()
    }

    /// Whether the profile selects a pod with `pod_labels` in a namespace with
    /// `namespace_labels` (`None` when the Namespace is unknown). `Err` says why not.
    pub fn selects(
        &self,
        pod_labels: &BTreeMap<String, String>,
        namespace_labels: Option<&BTreeMap<String, String>>,
    ) -> Result<(), NotSelected> {
        match &self.namespace_selector {
            Err(error) => return Err(NotSelected::InvalidSelector(error.clone())),
            Ok(None) => {}
            Ok(Some(selector)) => match namespace_labels {
                None => return Err(NotSelected::NamespaceUnknown),
                Some(labels) if !selector.matches(labels) => return Err(NotSelected::Namespace),
                Some(_) => {}
            },
        }
        match &self.selector {
            Err(error) => Err(NotSelected::InvalidSelector(error.clone())),
            Ok(Some(selector)) if !selector.matches(pod_labels) => Err(NotSelected::Pod),
            Ok(_) => Ok(()),
        }
    }

    /// The chance in percent (0..=100) that the profile applies to a selected pod.
    pub fn probability(&self) -> Result<u32, &ProfileError> {
        self.probability.as_ref().copied()
    }
}

fn parse_selector(
    field: &'static str,
    selector: Option<&LabelSelector>,
) -> Result<Option<Selector>, ProfileError> {
    match selector {
        None => Ok(None),
        Some(selector) => Selector::parse(selector)
            .map(|parsed| (!parsed.is_empty()).then_some(parsed))
            .map_err(|error| ProfileError::Selector {
                field,
                reason: error.to_string(),
            }),
    }
}

/// Resolves `probability` (`50`, `"50%"`, absent = 100) to a percentage in 0..=100.
pub fn probability_percent(spec: &ProfileSpec) -> Result<u32, ProfileError> {
    spec.probability_percent()
        .map(u32::from)
        .map_err(|error| ProfileError::Probability(error.to_string()))
}

/// The probability draw: applies iff `roll < percent` with `roll` uniform in 0..100, so the
/// chance is exactly `percent`%.
pub fn wins_draw(percent: u32, roll: u32) -> bool {
    roll < percent
}
