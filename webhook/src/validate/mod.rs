//! Validation of pods, the `slo-controller-config` ConfigMap and ClusterColocationProfiles.
//! Every violation names the field (or ConfigMap key) and the rule it breaks, so a rejected
//! `kubectl apply` tells the user exactly what to fix.

pub mod configmap;
pub mod pod;
pub mod profile;

use std::fmt;

use serde::Serialize;

/// One broken rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// Field path or ConfigMap key, e.g. `metadata.labels[koordinator.sh/qosClass]` or
    /// `cpu-burst-config: podStrategies[1].cpuBurstConfig.cpuBurstPercent`.
    pub field: String,
    /// The rule, e.g. `0 is below 1`.
    pub rule: String,
}

impl Violation {
    /// A violation of `rule` at `field`.
    pub fn new(field: impl Into<String>, rule: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            rule: rule.into(),
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.rule)
    }
}

/// Joins violations into one denial message.
pub fn denial_message(violations: &[Violation]) -> String {
    violations
        .iter()
        .map(Violation::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}
