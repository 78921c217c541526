//! ClusterColocationProfile (`config.koordinator.sh/v1alpha1`): which new pods the webhook
//! turns into colocated pods, and what it writes into them (QoS label, priority class,
//! labels, annotations, scheduler, a strategic-merge patch).
//!
//! Lets users colocate a workload (e.g. every Spark pod in labelled namespaces) without
//! touching its manifests. Field names are upstream's.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
#[cfg(feature = "crd")]
use kube::CustomResource;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use crate::qos::QoSClass;

/// Which pods a profile applies to and what it writes into them.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[cfg_attr(feature = "crd", derive(CustomResource))]
#[cfg_attr(
    feature = "crd",
    kube(
        group = "config.koordinator.sh",
        version = "v1alpha1",
        derive = "PartialEq",
        kind = "ClusterColocationProfile",
        doc = "ClusterColocationProfile: selects new pods and makes them colocated pods (QoS class, priority, labels, batch resources).",
        plural = "clustercolocationprofiles",
        status = "ClusterColocationProfileStatus",
        printcolumn = r#"{"name":"QoS","type":"string","jsonPath":".spec.qosClass","description":"QoS class written to matching pods"}"#,
        printcolumn = r#"{"name":"Priority","type":"string","jsonPath":".spec.priorityClassName","description":"PriorityClass given to matching pods"}"#,
        printcolumn = r#"{"name":"Probability","type":"string","jsonPath":".spec.probability","description":"Chance the profile applies to a matching pod"}"#,
        printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterColocationProfileSpec {
    /// Matches the labels of the pod's Namespace; unset or empty matches every namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// Matches the pod's labels; unset or empty matches every pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// Chance, 0 to 100, that the profile applies to a matching pod: an integer (`50`) or a
    /// percentage (`"50%"`). Unset means 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probability: Option<IntOrString>,
    /// Koordinator QoS class written to the pod label `koordinator.sh/qosClass`
    /// (`LSE`, `LSR`, `LS`, `BE`, `SYSTEM`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "qos_class_enum")]
    pub qos_class: Option<String>,
    /// PriorityClass to give the pod (sets `priorityClassName`, `priority` and
    /// `preemptionPolicy`); it must exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// Koordinator sub-priority written to the pod label `koordinator.sh/priority`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub koordinator_priority: Option<i32>,
    /// Labels set on the pod (existing values are overwritten).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Annotations set on the pod (existing values are overwritten).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    /// Copies labels: for each `old: new`, the pod gets label `new` with the value of `old`
    /// (empty when `old` is missing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_keys_mapping: Option<BTreeMap<String, String>>,
    /// Copies annotations: for each `old: new`, the pod gets annotation `new` with the value of
    /// `old` (empty when `old` is missing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotation_keys_mapping: Option<BTreeMap<String, String>>,
    /// Suffixes appended to the values of existing pod labels (`key: suffix`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_suffixes: Option<BTreeMap<String, String>>,
    /// Scheduler that schedules the pod (e.g. `koord-scheduler`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_name: Option<String>,
    /// Strategic-merge patch applied to the pod last, kept verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::preserve_unknown_object")]
    pub patch: Option<serde_json::Value>,
}

/// Upstream defines no status; kept for the status subresource.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ClusterColocationProfileStatus {}

fn qos_class_enum(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "enum": ["LSE", "LSR", "LS", "BE", "SYSTEM"],
        "nullable": true
    })
}

/// Why a profile's `probability` is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbabilityError {
    /// Not an integer or an integer followed by `%`.
    #[error("probability {0:?} is not an integer or a percentage like \"50%\"")]
    NotAPercent(String),
    /// Outside 0 to 100.
    #[error("probability {0} is outside 0..=100")]
    OutOfRange(i64),
}

impl ClusterColocationProfileSpec {
    /// The QoS class the profile writes, when it names a known one.
    pub fn qos(&self) -> Option<QoSClass> {
        match self.qos_class.as_deref().map(QoSClass::from_name) {
            None | Some(QoSClass::None) => None,
            Some(class) => Some(class),
        }
    }

    /// The probability as a percentage 0..=100; unset is 100. Upstream scales an int or a
    /// `"N%"` string against 100 and rounds down; values outside 0..=100 are rejected here.
    pub fn probability_percent(&self) -> Result<u8, ProbabilityError> {
        let percent = match &self.probability {
            None => 100,
            Some(IntOrString::Int(value)) => i64::from(*value),
            Some(IntOrString::String(text)) => text
                .strip_suffix('%')
                .and_then(|digits| digits.parse::<i64>().ok())
                .ok_or_else(|| ProbabilityError::NotAPercent(text.clone()))?,
        };
        u8::try_from(percent)
            .ok()
            .filter(|p| *p <= 100)
            .ok_or(ProbabilityError::OutOfRange(percent))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_probability(probability: Option<IntOrString>) -> ClusterColocationProfileSpec {
        ClusterColocationProfileSpec {
            probability,
            ..Default::default()
        }
    }

    #[test]
    fn probability_forms() {
        let cases = [
            (None, Ok(100)),
            (Some(IntOrString::Int(0)), Ok(0)),
            (Some(IntOrString::Int(50)), Ok(50)),
            (Some(IntOrString::Int(100)), Ok(100)),
            (
                Some(IntOrString::Int(101)),
                Err(ProbabilityError::OutOfRange(101)),
            ),
            (Some(IntOrString::Int(-1)), Err(ProbabilityError::OutOfRange(-1))),
            (Some(IntOrString::String("50%".into())), Ok(50)),
            (Some(IntOrString::String("100%".into())), Ok(100)),
            (Some(IntOrString::String("0%".into())), Ok(0)),
            (
                Some(IntOrString::String("150%".into())),
                Err(ProbabilityError::OutOfRange(150)),
            ),
            (
                Some(IntOrString::String("50".into())),
                Err(ProbabilityError::NotAPercent("50".into())),
            ),
            (
                Some(IntOrString::String("half%".into())),
                Err(ProbabilityError::NotAPercent("half%".into())),
            ),
            (
                Some(IntOrString::String("".into())),
                Err(ProbabilityError::NotAPercent("".into())),
            ),
        ];
        for (probability, expected) in cases {
            assert_eq!(
                with_probability(probability.clone()).probability_percent(),
                expected,
                "{probability:?}"
            );
        }
    }

    #[test]
    fn qos_reads_known_classes_only() {
        let spec = |q: &str| ClusterColocationProfileSpec {
            qos_class: Some(q.into()),
            ..Default::default()
        };
        assert_eq!(spec("BE").qos(), Some(QoSClass::Be));
        assert_eq!(spec("LSR").qos(), Some(QoSClass::Lsr));
        assert_eq!(spec("be").qos(), None);
        assert_eq!(ClusterColocationProfileSpec::default().qos(), None);
    }
}
