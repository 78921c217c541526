//! Label and field selectors: the query-string forms (`labelSelector`, `fieldSelector`) and the
//! structured `LabelSelector` objects used by PDBs and webhook configurations.

use serde_json::Value;

/// A selector the API server cannot parse or evaluate; it answers with this text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// `key in (...)` / `key notin (...)` without a parenthesised set.
    #[error("bad set in {0:?}")]
    BadSet(String),
    /// A label selector requirement with an empty key or one with other characters.
    #[error("invalid label selector {selector:?}: bad key {key:?}")]
    BadKey {
        /// The whole selector.
        selector: String,
        /// The key it names.
        key: String,
    },
    /// A field selector term without `=`, `==` or `!=`.
    #[error("invalid field selector term {0:?}")]
    FieldTerm(String),
    /// A field selector path with an empty segment.
    #[error("invalid field path in {0:?}")]
    FieldPath(String),
    /// A `matchExpressions` entry without `key`.
    #[error("matchExpressions[].key is required")]
    MissingKey,
    /// A `matchExpressions` operator other than In, NotIn, Exists, DoesNotExist.
    #[error("unknown label selector operator {0:?}")]
    UnknownOperator(Option<String>),
}

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq)]
enum LabelReq {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed `labelSelector` query parameter (all requirements must hold).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(Vec<LabelReq>);

fn split_top_level(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect()
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn parse_set(rest: &str) -> Option<Vec<String>> {
    let inner = rest.trim().strip_prefix('(')?.strip_suffix(')')?;
    Some(
        inner
            .split(',')
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .collect(),
    )
}

impl LabelSelector {
    /// Parse the string form, e.g. `app=web,tier in (a,b),!legacy`.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut reqs = Vec::new();
        for part in split_top_level(s) {
            let req = if let Some(key) = part.strip_prefix('!') {
                LabelReq::NotExists(key.trim().to_string())
            } else if let Some((k, v)) = part.split_once("!=") {
                LabelReq::NotEq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once("==") {
                LabelReq::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once('=') {
                LabelReq::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, rest)) = part.split_once(" notin ") {
                LabelReq::NotIn(
                    k.trim().into(),
                    parse_set(rest).ok_or_else(|| SelectorError::BadSet(part.to_owned()))?,
                )
            } else if let Some((k, rest)) = part.split_once(" in ") {
                LabelReq::In(
                    k.trim().into(),
                    parse_set(rest).ok_or_else(|| SelectorError::BadSet(part.to_owned()))?,
                )
            } else {
                LabelReq::Exists(part.to_string())
            };
            let key = match &req {
                LabelReq::Eq(k, _)
                | LabelReq::NotEq(k, _)
                | LabelReq::In(k, _)
                | LabelReq::NotIn(k, _)
                | LabelReq::Exists(k)
                | LabelReq::NotExists(k) => k,
            };
            if !valid_key(key) {
                return Err(SelectorError::BadKey {
                    selector: s.to_owned(),
                    key: key.clone(),
                });
            }
            reqs.push(req);
        }
        Ok(Self(reqs))
    }

    /// Does an object's `metadata.labels` satisfy every requirement?
    pub fn matches(&self, labels: Option<&Value>) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            LabelReq::Eq(k, v) => get(k) == Some(v.as_str()),
            LabelReq::NotEq(k, v) => get(k) != Some(v.as_str()),
            LabelReq::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelReq::NotIn(k, vs) => get(k).is_none_or(|x| vs.iter().all(|v| v != x)),
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::NotExists(k) => get(k).is_none(),
        })
    }
}

/// A parsed `fieldSelector`: `path=value` / `path!=value` terms over the object's JSON.
///
/// Any dotted field path is accepted (a real API server allows only a per-kind set); a missing
/// field compares as the empty string, so `spec.nodeName=` selects unscheduled pods.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(Vec<(Vec<String>, bool, String)>);

impl FieldSelector {
    /// Parse `metadata.name=x,status.phase!=Failed`.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut terms = Vec::new();
        for part in split_top_level(s) {
            let (path, eq, value) = if let Some((k, v)) = part.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, true, v)
            } else {
                return Err(SelectorError::FieldTerm(part.to_owned()));
            };
            let path: Vec<String> = path.trim().split('.').map(String::from).collect();
            if path.iter().any(String::is_empty) {
                return Err(SelectorError::FieldPath(part.to_owned()));
            }
            terms.push((path, eq, value.trim().to_string()));
        }
        Ok(Self(terms))
    }

    /// Does the object satisfy every term?
    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(path, eq, want)| {
            let got = path.iter().try_fold(obj, |v, k| v.get(k.as_str()));
            let got = match got {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
            };
            (got == *want) == *eq
        })
    }
}

/// Match a structured `metav1.LabelSelector` (JSON) against labels. `None`/`{}` matches all.
pub fn label_selector_object_matches(
    selector: Option<&Value>,
    labels: Option<&Value>,
) -> Result<bool, SelectorError> {
    let Some(sel) = selector.filter(|s| !s.is_null()) else {
        return Ok(true);
    };
    let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
    if let Some(ml) = sel.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in ml {
            if get(k) != v.as_str() {
                return Ok(false);
            }
        }
    }
    for expr in sel
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = expr
            .get("key")
            .and_then(Value::as_str)
            .ok_or(SelectorError::MissingKey)?;
        let values: Vec<&str> = expr
            .get("values")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let ok = match expr.get("operator").and_then(Value::as_str) {
            Some("In") => get(key).is_some_and(|x| values.contains(&x)),
            Some("NotIn") => get(key).is_none_or(|x| !values.contains(&x)),
            Some("Exists") => get(key).is_some(),
            Some("DoesNotExist") => get(key).is_none(),
            other => return Err(SelectorError::UnknownOperator(other.map(str::to_owned))),
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selector_forms() {
        let labels = json!({"app": "web", "tier": "a"});
        let m = |s: &str| LabelSelector::parse(s).unwrap().matches(Some(&labels));
        assert!(m("app=web"));
        assert!(m("app==web,tier in (a, b)"));
        assert!(!m("app!=web"));
        assert!(m("tier notin (c),!legacy,app"));
        assert!(!m("legacy"));
        assert_eq!(
            LabelSelector::parse("a b=c").unwrap_err().to_string(),
            r#"invalid label selector "a b=c": bad key "a b""#
        );
        assert_eq!(
            LabelSelector::parse("tier in a"),
            Err(SelectorError::BadSet("tier in a".into()))
        );
    }

    #[test]
    fn field_selector_missing_is_empty() {
        let pod = json!({"metadata": {"name": "p"}, "spec": {}, "status": {"phase": "Running"}});
        let m = |s: &str| FieldSelector::parse(s).unwrap().matches(&pod);
        assert!(m("spec.nodeName="));
        assert!(m("metadata.name=p,status.phase!=Failed"));
        assert!(!m("status.phase=Pending"));
        assert_eq!(
            FieldSelector::parse("nonsense").unwrap_err().to_string(),
            r#"invalid field selector term "nonsense""#
        );
        assert_eq!(
            FieldSelector::parse("spec..x=1"),
            Err(SelectorError::FieldPath("spec..x=1".into()))
        );
    }

    #[test]
    fn structured_selector() {
        let labels = json!({"app": "web"});
        let sel = json!({"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "x", "operator": "DoesNotExist"}]});
        assert!(label_selector_object_matches(Some(&sel), Some(&labels)).unwrap());
        let bad = json!({"matchExpressions": [{"key": "x", "operator": "Nope"}]});
        assert_eq!(
            label_selector_object_matches(Some(&bad), Some(&labels))
                .unwrap_err()
                .to_string(),
            r#"unknown label selector operator Some("Nope")"#
        );
    }
}
