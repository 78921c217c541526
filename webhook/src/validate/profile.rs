//! ClusterColocationProfile rules: selectors parse, qosClass is a known class, probability is
//! 0..100, and the patch is an object.

use koord_api::QoSClass;

use super::Violation;
use crate::mutate::profile::{CompiledProfile, ProfileError};

/// Checks a profile given in its JSON form.
pub fn validate_profile(object: &serde_json::Value) -> Vec<Violation> {
    let profile = match CompiledProfile::from_json(object) {
        Ok(profile) => profile,
        Err(error) => return vec![Violation::new("spec", error.to_string())],
    };
    let mut violations: Vec<Violation> = profile
        .problems()
        .into_iter()
        .map(|problem| match problem {
            ProfileError::Selector { field, reason } => Violation::new(format!("spec.{field}"), reason),
            ProfileError::Probability(reason) => Violation::new("spec.probability", reason),
            ProfileError::Shape(reason) => Violation::new("spec", reason),
        })
        .collect();
    if let Some(qos) = profile.spec.qos_class.as_deref().filter(|qos| !qos.is_empty())
        && QoSClass::from_name(qos) == QoSClass::None
    {
        violations.push(Violation::new(
            "spec.qosClass",
            format!("{qos:?} is not one of LSE, LSR, LS, BE, SYSTEM"),
        ));
    }
    if let Some(patch) = &profile.spec.patch
        && !patch.is_object()
    {
        violations.push(Violation::new(
            "spec.patch",
            "must be an object (a strategic-merge patch of a Pod)",
        ));
    }
    violations
}
