//! Which webhooks a request goes to: `rules` (operations, groups, versions, resources with
//! subresources, scope), `namespaceSelector` and `objectSelector` (pure functions).

use serde_json::Value;

use crate::apiserver::selector::{SelectorError, label_selector_object_matches};

/// Admission operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// Create.
    Create,
    /// Update.
    Update,
    /// Delete.
    Delete,
}

impl Operation {
    /// The name used in rules and AdmissionReview.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
        }
    }
}

/// The request attributes rules are matched against.
#[derive(Debug, Clone)]
pub struct RequestAttributes<'a> {
    /// Operation.
    pub operation: Operation,
    /// API group.
    pub group: &'a str,
    /// API version.
    pub version: &'a str,
    /// Plural resource.
    pub resource: &'a str,
    /// Subresource or `""`.
    pub subresource: &'a str,
    /// Namespaced resource?
    pub namespaced: bool,
}

fn list_has(rule: &Value, field: &str, want: &str) -> bool {
    rule.get(field)
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().filter_map(Value::as_str).any(|x| x == "*" || x == want))
}

fn resource_matches(pattern: &str, resource: &str, sub: &str) -> bool {
    let (pr, ps) = pattern.split_once('/').unwrap_or((pattern, ""));
    let res_ok = pr == "*" || pr == resource;
    let sub_ok = if pattern.contains('/') {
        ps == "*" || ps == sub
    } else {
        sub.is_empty()
    };
    res_ok && sub_ok
}

/// Does one `rules[]` entry match?
pub fn rule_matches(rule: &Value, a: &RequestAttributes<'_>) -> bool {
    let scope_ok = match rule.get("scope").and_then(Value::as_str).unwrap_or("*") {
        "Namespaced" => a.namespaced,
        "Cluster" => !a.namespaced,
        _ => true,
    };
    scope_ok
        && list_has(rule, "operations", a.operation.as_str())
        && list_has(rule, "apiGroups", a.group)
        && list_has(rule, "apiVersions", a.version)
        && rule.get("resources").and_then(Value::as_array).is_some_and(|rs| {
            rs.iter()
                .filter_map(Value::as_str)
                .any(|p| resource_matches(p, a.resource, a.subresource))
        })
}

/// Should this webhook be called? `namespace_labels` are the labels of the request's namespace
/// (or of the Namespace object itself), `None` for cluster-scoped objects.
pub fn webhook_matches(
    webhook: &Value,
    a: &RequestAttributes<'_>,
    namespace_labels: Option<&Value>,
    object_labels: &[Option<&Value>],
) -> Result<bool, SelectorError> {
    let rules = webhook.get("rules").and_then(Value::as_array);
    if !rules.is_some_and(|rs| rs.iter().any(|r| rule_matches(r, a))) {
        return Ok(false);
    }
    let is_namespace_object = a.group.is_empty() && a.resource == "namespaces";
    if a.namespaced || is_namespace_object {
        let labels = if is_namespace_object {
            object_labels.iter().flatten().next().copied()
        } else {
            namespace_labels
        };
        if !label_selector_object_matches(webhook.get("namespaceSelector"), labels)? {
            return Ok(false);
        }
    }
    let sel = webhook.get("objectSelector");
    let mut any = object_labels.is_empty();
    for labels in object_labels {
        any |= label_selector_object_matches(sel, *labels)?;
    }
    Ok(any)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn attrs(op: Operation, sub: &'static str) -> RequestAttributes<'static> {
        RequestAttributes {
            operation: op,
            group: "",
            version: "v1",
            resource: "pods",
            subresource: sub,
            namespaced: true,
        }
    }

    #[test]
    fn rules_and_selectors() {
        let wh = json!({
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
            "namespaceSelector": {"matchLabels": {"team": "a"}},
            "objectSelector": {"matchExpressions": [{"key": "skip", "operator": "DoesNotExist"}]}
        });
        let ns = json!({"team": "a"});
        let pod = json!({"app": "x"});
        assert!(webhook_matches(&wh, &attrs(Operation::Create, ""), Some(&ns), &[Some(&pod)]).unwrap());
        assert!(!webhook_matches(&wh, &attrs(Operation::Update, ""), Some(&ns), &[Some(&pod)]).unwrap());
        assert!(
            !webhook_matches(&wh, &attrs(Operation::Create, "status"), Some(&ns), &[Some(&pod)]).unwrap()
        );
        assert!(
            !webhook_matches(
                &wh,
                &attrs(Operation::Create, ""),
                Some(&json!({})),
                &[Some(&pod)]
            )
            .unwrap()
        );
        let skip = json!({"skip": "1"});
        assert!(!webhook_matches(&wh, &attrs(Operation::Create, ""), Some(&ns), &[Some(&skip)]).unwrap());
        assert!(resource_matches("*/*", "pods", "status"));
        assert!(resource_matches("pods/*", "pods", "status"));
        assert!(!resource_matches("*", "pods", "status"));
    }
}
