//! One AdmissionReview in, one AdmissionReview out: the adapter between the wire and the
//! decisions. It never fails: an unreadable review gets an `invalid` response naming the
//! problem, a review for something the endpoint does not handle is allowed untouched, and a
//! broken rule is a denial whose message names the field and the rule.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use serde_json::value::RawValue;

use crate::mutate::{MutationOptions, mutate_pod};
use crate::validate::configmap::{SloConfigName, validate_config_map_request};
use crate::validate::pod::{PodValidationOptions, validate_pod};
use crate::validate::profile::validate_profile;
use crate::validate::{Violation, denial_message};
use crate::view::ClusterView;
use crate::wire::{Head, RequestHead};

/// The admission paths this webhook serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// `/mutate-pod`: profiles, batch resources, extended-resource-spec (CREATE).
    MutatePod,
    /// `/validate-pod`: QoS, priority and resource rules (CREATE, UPDATE).
    ValidatePod,
    /// `/validate-configmap`: the slo-controller-config (CREATE, UPDATE).
    ValidateConfigMap,
    /// `/validate-clustercolocationprofile`: profiles (CREATE, UPDATE).
    ValidateProfile,
}

impl Endpoint {
    /// Every endpoint.
    pub const ALL: [Endpoint; 4] = [
        Endpoint::MutatePod,
        Endpoint::ValidatePod,
        Endpoint::ValidateConfigMap,
        Endpoint::ValidateProfile,
    ];

    /// The URL path.
    pub fn path(self) -> &'static str {
        match self {
            Endpoint::MutatePod => "/mutate-pod",
            Endpoint::ValidatePod => "/validate-pod",
            Endpoint::ValidateConfigMap => "/validate-configmap",
            Endpoint::ValidateProfile => "/validate-clustercolocationprofile",
        }
    }

    /// The operations the API server sends to this endpoint (the webhook configurations' rules).
    pub fn operations(self) -> &'static [&'static str] {
        match self {
            Endpoint::MutatePod => &["CREATE"],
            _ => &["CREATE", "UPDATE"],
        }
    }

    /// The outcomes this endpoint can answer with.
    pub fn outcomes(self) -> &'static [Outcome] {
        match self {
            Endpoint::MutatePod => &[
                Outcome::Allowed,
                Outcome::Patched,
                Outcome::Denied,
                Outcome::Invalid,
                Outcome::Excluded,
            ],
            Endpoint::ValidatePod => &[
                Outcome::Allowed,
                Outcome::Denied,
                Outcome::Invalid,
                Outcome::Excluded,
            ],
            Endpoint::ValidateConfigMap | Endpoint::ValidateProfile => {
                &[Outcome::Allowed, Outcome::Denied, Outcome::Invalid]
            }
        }
    }

    fn expected_kind(self) -> &'static str {
        match self {
            Endpoint::MutatePod | Endpoint::ValidatePod => "Pod",
            Endpoint::ValidateConfigMap => "ConfigMap",
            Endpoint::ValidateProfile => "ClusterColocationProfile",
        }
    }
}

/// Everything a decision needs besides the request: cluster state and switches.
#[derive(Clone)]
pub struct Decider {
    /// Cluster state (reflector caches or fixed objects).
    pub view: Arc<dyn ClusterView>,
    /// Mutation switches.
    pub mutation: MutationOptions,
    /// Pod validation switches.
    pub pod_validation: PodValidationOptions,
    /// Namespace of the slo-controller-config.
    pub config_namespace: String,
    /// Name of the slo-controller-config.
    pub slo_config_name: String,
    /// Namespaces whose pods the pod endpoints never judge.
    pub excluded_namespaces: ExcludedNamespaces,
}

impl Decider {
    /// A decider over `view` with the defaults of the binary: no switches, the
    /// slo-controller-config in `koordinator-system`, pods of `kube-system` and
    /// `koordinator-system` left alone.
    pub fn new(view: Arc<dyn ClusterView>) -> Self {
        Decider {
            view,
            mutation: MutationOptions::default(),
            pod_validation: PodValidationOptions::default(),
            config_namespace: koord_api::names::DEFAULT_CONFIG_NAMESPACE.into(),
            slo_config_name: koord_api::names::DEFAULT_SLO_CONFIG_NAME.into(),
            excluded_namespaces: ExcludedNamespaces::new([
                "kube-system",
                koord_api::names::DEFAULT_CONFIG_NAMESPACE,
            ]),
        }
    }
}

/// Namespaces whose pods are allowed untouched by `/mutate-pod` and `/validate-pod`.
///
/// The chart also keeps these namespaces out of the webhook configurations with a
/// `kubernetes.io/metadata.name` selector, but API servers before 1.21 do not set that label,
/// so there the selector matches every namespace. Checking the name here as well makes the
/// exclusion hold on every version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExcludedNamespaces(Arc<std::collections::BTreeSet<String>>);

impl ExcludedNamespaces {
    /// The set of `names` (empty names are ignored).
    pub fn new<I, S>(names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self(Arc::new(
            names
                .into_iter()
                .map(Into::into)
                .filter(|name: &String| !name.is_empty())
                .collect(),
        ))
    }

    /// Whether pods of `namespace` are excluded.
    pub fn contains(&self, namespace: &str) -> bool {
        self.0.contains(namespace)
    }

    /// The names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(String::as_str)
    }
}

/// How a review was answered (the `result` metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Allowed without changes.
    Allowed,
    /// Allowed with a JSONPatch.
    Patched,
    /// Denied by a rule.
    Denied,
    /// The review itself was unreadable.
    Invalid,
    /// Allowed untouched because the pod's namespace is excluded.
    Excluded,
}

impl Outcome {
    /// Metric label value.
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Patched => "patched",
            Outcome::Denied => "denied",
            Outcome::Invalid => "invalid",
            Outcome::Excluded => "excluded",
        }
    }
}

/// A finished answer.
#[derive(Debug)]
pub struct Answer {
    /// The review to send back (always with HTTP 200).
    pub review: AdmissionReview<DynamicObject>,
    /// CREATE, UPDATE, DELETE, CONNECT or `unknown`.
    pub operation: &'static str,
    /// How it was answered.
    pub outcome: Outcome,
}

fn operation_label(operation: &Operation) -> &'static str {
    match operation {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    }
}

fn invalid(uid: Option<&str>, reason: String) -> Answer {
    let mut response = AdmissionResponse::invalid(reason);
    if let Some(uid) = uid {
        response.uid = uid.to_string();
    }
    Answer {
        review: response.into_review(),
        operation: "unknown",
        outcome: Outcome::Invalid,
    }
}

/// Allows a review this endpoint does not judge without decoding its object (a sub-resource's
/// object, e.g. a Binding, need not look like the endpoint's kind).
fn allow_unjudged(head: &Head<'_>, request: &RequestHead<'_>) -> Answer {
    let mut response = AdmissionResponse::invalid("");
    response.allowed = true;
    response.result = kube::core::Status::success();
    response.uid = request.uid.as_str().unwrap_or_default().to_string();
    if let Some(api_version) = head.api_version.as_str() {
        response.types.api_version = api_version.to_string();
    }
    let operation = match request.operation.as_str() {
        Some("CREATE") => "CREATE",
        Some("UPDATE") => "UPDATE",
        Some("DELETE") => "DELETE",
        Some("CONNECT") => "CONNECT",
        _ => "unknown",
    };
    Answer {
        review: response.into_review(),
        operation,
        outcome: Outcome::Allowed,
    }
}

/// Answers one review body for `endpoint`. `roll` draws profile probabilities (0..100).
///
/// The body is read in two steps, both straight from the bytes: a head (the request's uid,
/// kind, sub-resource and operation, everything else skipped without allocating) decides
/// whether this endpoint judges the review at all, then the request alone is decoded into its
/// typed form. kube's `AdmissionReview` flattens its type fields, which makes serde buffer the
/// whole document in an intermediate tree first; decoding the request directly avoids that.
pub fn answer(endpoint: Endpoint, body: &[u8], decider: &Decider, roll: &mut dyn FnMut() -> u32) -> Answer {
    if body.trim_ascii_start().first() != Some(&b'{') {
        return match serde_json::from_slice::<serde::de::IgnoredAny>(body) {
            Ok(_) => invalid(None, "the AdmissionReview has no request".to_string()),
            Err(error) => invalid(None, format!("the body is not JSON: {error}")),
        };
    }
    let head: Head<'_> = match serde_json::from_slice(body) {
        Ok(head) => head,
        Err(error) if error.is_data() => {
            return invalid(None, format!("the AdmissionReview does not decode: {error}"));
        }
        Err(error) => return invalid(None, format!("the body is not JSON: {error}")),
    };
    let Some(raw_request) = head.request.filter(|raw| raw.get().starts_with('{')) else {
        return invalid(None, "the AdmissionReview has no request".to_string());
    };
    let request_head: RequestHead<'_> = match serde_json::from_str(raw_request.get()) {
        Ok(request_head) => request_head,
        Err(error) => return invalid(None, format!("the AdmissionReview does not decode: {error}")),
    };
    let kind = request_head.kind().unwrap_or_default();
    let sub_resource = request_head.sub_resource.as_str().unwrap_or_default();
    if kind != endpoint.expected_kind() || !sub_resource.is_empty() {
        // Not ours to judge (a sub-resource like pods/binding, or a misrouted kind).
        return allow_unjudged(&head, &request_head);
    }
    if matches!(endpoint, Endpoint::MutatePod | Endpoint::ValidatePod)
        && decider
            .excluded_namespaces
            .contains(request_head.namespace.as_str().unwrap_or_default())
    {
        let mut answer = allow_unjudged(&head, &request_head);
        answer.outcome = Outcome::Excluded;
        return answer;
    }
    let uid = request_head.uid.as_str();
    match endpoint {
        Endpoint::MutatePod => match decode::<Pod>(&head, raw_request) {
            Ok(request) => mutate(&request, decider, roll),
            Err(reason) => invalid(uid, reason),
        },
        Endpoint::ValidatePod => match decode::<Pod>(&head, raw_request) {
            Ok(request) => {
                let violations = match (&request.operation, &request.object) {
                    (Operation::Create | Operation::Update, Some(pod)) => {
                        validate_pod(pod, request.old_object.as_ref(), decider.pod_validation)
                    }
                    _ => Vec::new(),
                };
                judged(&request, &violations)
            }
            Err(reason) => invalid(uid, reason),
        },
        Endpoint::ValidateConfigMap => match decode::<ConfigMap>(&head, raw_request) {
            Ok(request) => {
                let violations = match (&request.operation, &request.object) {
                    (Operation::Create | Operation::Update, Some(config_map)) => validate_config_map_request(
                        config_map,
                        request.namespace.as_deref(),
                        SloConfigName {
                            namespace: &decider.config_namespace,
                            name: &decider.slo_config_name,
                        },
                        decider.view.as_ref(),
                    ),
                    _ => Vec::new(),
                };
                judged(&request, &violations)
            }
            Err(reason) => invalid(uid, reason),
        },
        Endpoint::ValidateProfile => match decode::<DynamicObject>(&head, raw_request) {
            Ok(request) => {
                let violations = match (
                    &request.operation,
                    request.object.as_ref().map(serde_json::to_value),
                ) {
                    (Operation::Create | Operation::Update, Some(Ok(object))) => validate_profile(&object),
                    (_, Some(Err(error))) => vec![Violation::new("object", error.to_string())],
                    _ => Vec::new(),
                };
                judged(&request, &violations)
            }
            Err(reason) => invalid(uid, reason),
        },
    }
}

/// Decodes the typed request from its raw JSON; the review's `apiVersion` and `kind` are
/// required, as kube's `AdmissionReview` requires them.
fn decode<K>(head: &Head<'_>, raw_request: &RawValue) -> Result<AdmissionRequest<K>, String>
where
    K: kube::Resource + serde::de::DeserializeOwned,
{
    let missing = |field: &str| format!("the AdmissionReview does not decode: missing field `{field}`");
    let api_version = head.api_version.as_str().ok_or_else(|| missing("apiVersion"))?;
    let kind = head.kind.as_str().ok_or_else(|| missing("kind"))?;
    let mut request: AdmissionRequest<K> = serde_json::from_str(raw_request.get())
        .map_err(|error| format!("the AdmissionReview does not decode: request: {error}"))?;
    request.types = kube::core::TypeMeta {
        api_version: api_version.to_string(),
        kind: kind.to_string(),
    };
    Ok(request)
}

fn finish<K: kube::Resource>(
    request: &AdmissionRequest<K>,
    response: AdmissionResponse,
    outcome: Outcome,
) -> Answer {
    Answer {
        review: response.into_review(),
        operation: operation_label(&request.operation),
        outcome,
    }
}

fn judged<K: kube::Resource>(request: &AdmissionRequest<K>, violations: &[Violation]) -> Answer {
    if violations.is_empty() {
        finish(request, AdmissionResponse::from(request), Outcome::Allowed)
    } else {
        let message = denial_message(violations);
        tracing::info!(uid = %request.uid, name = %request.name, %message, "denied");
        finish(
            request,
            AdmissionResponse::from(request).deny(message),
            Outcome::Denied,
        )
    }
}

fn mutate(request: &AdmissionRequest<Pod>, decider: &Decider, roll: &mut dyn FnMut() -> u32) -> Answer {
    let response = AdmissionResponse::from(request);
    let (Operation::Create, Some(pod)) = (&request.operation, &request.object) else {
        return finish(request, response, Outcome::Allowed);
    };
    let namespace = request.namespace.as_deref().unwrap_or_default();
    let mutation = match mutate_pod(pod, namespace, decider.view.as_ref(), decider.mutation, roll) {
        Ok(mutation) => mutation,
        Err(error) => {
            tracing::warn!(uid = %request.uid, %error, "pod mutation denied");
            return finish(request, response.deny(error.to_string()), Outcome::Denied);
        }
    };
    let warnings: Vec<String> = mutation
        .profiles
        .iter()
        .filter(|outcome| outcome.reason.starts_with("invalid"))
        .map(|outcome| format!("ClusterColocationProfile {}: {}", outcome.name, outcome.reason))
        .collect();
    for warning in &warnings {
        tracing::warn!(%warning, "profile skipped");
    }
    let mut response = response;
    if !warnings.is_empty() {
        response.warnings = Some(warnings);
    }
    if mutation.patch.0.is_empty() {
        return finish(request, response, Outcome::Allowed);
    }
    match response.clone().with_patch(mutation.patch) {
        Ok(patched) => finish(request, patched, Outcome::Patched),
        Err(error) => finish(request, response.deny(error.to_string()), Outcome::Denied),
    }
}

pub use crate::wire::to_wire_json;
