//! Label selector matching used until `koord_api::selector` lands on main (same API, fewer
//! checks); replaced by a re-export of the api crate's implementation once merged.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Why a selector cannot be used; such a selector never matches.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SelectorError(pub String);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A validated selector.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selector {
    requirements: Vec<Requirement>,
}

impl Selector {
    /// Validates a wire selector.
    pub fn parse(selector: &LabelSelector) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        for (key, value) in selector.match_labels.iter().flatten() {
            requirements.push(Requirement::In(key.clone(), vec![value.clone()]));
        }
        for (index, expr) in selector.match_expressions.iter().flatten().enumerate() {
            let values = expr.values.clone().unwrap_or_default();
            let key = expr.key.clone();
            requirements.push(match (expr.operator.as_str(), values.is_empty()) {
                ("In", false) => Requirement::In(key, values),
                ("NotIn", false) => Requirement::NotIn(key, values),
                ("Exists", true) => Requirement::Exists(key),
                ("DoesNotExist", true) => Requirement::DoesNotExist(key),
                (op, _) => {
                    return Err(SelectorError(format!(
                        "matchExpressions[{index}]: operator {op:?} with {} values is not valid",
                        values.len()
                    )));
                }
            });
        }
        Ok(Self { requirements })
    }

    /// Whether an object with these labels is selected.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|requirement| match requirement {
            Requirement::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
        })
    }
}
