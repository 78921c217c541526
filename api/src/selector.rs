//! Kubernetes label selectors: parsing, matching and overlap detection.
//!
//! One implementation shared by the `slo-controller-config` merge (node selectors), the
//! webhook (namespace and pod selectors, node-entry overlap) and koordlet (pod-level burst
//! strategies), so that every component agrees on which object a selector picks.
//!
//! Semantics follow Kubernetes `LabelSelectorAsSelector`: `matchLabels` and `matchExpressions`
//! are ANDed; an empty selector (`{}`) matches everything. Whether a *missing* selector matches
//! nothing or everything depends on the caller (node entries: nothing; pod strategies: all), so
//! it is not decided here.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use thiserror::Error;

/// Why a label selector cannot be used. Such a selector never matches anything.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SelectorError {
    /// The operator is not one of `In`, `NotIn`, `Exists`, `DoesNotExist`.
    #[error("matchExpressions[{index}]: operator {operator:?} is not one of In, NotIn, Exists, DoesNotExist")]
    UnknownOperator {
        /// Position of the expression.
        index: usize,
        /// The operator as written.
        operator: String,
    },
    /// `In`/`NotIn` without values.
    #[error("matchExpressions[{index}]: operator {operator} needs at least one value")]
    MissingValues {
        /// Position of the expression.
        index: usize,
        /// The operator as written.
        operator: String,
    },
    /// `Exists`/`DoesNotExist` with values.
    #[error("matchExpressions[{index}]: operator {operator} takes no values")]
    UnexpectedValues {
        /// Position of the expression.
        index: usize,
        /// The operator as written.
        operator: String,
    },
    /// A label key that Kubernetes would reject.
    #[error("invalid label key {key:?}: {reason}")]
    InvalidKey {
        /// The key as written.
        key: String,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// A label value that Kubernetes would reject.
    #[error("invalid label value {value:?} for key {key:?}: {reason}")]
    InvalidValue {
        /// The key it belongs to.
        key: String,
        /// The value as written.
        value: String,
        /// Which rule it breaks.
        reason: &'static str,
    },
}

/// One requirement of a parsed selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    /// The label is present and its value is one of the set.
    In(String, Vec<String>),
    /// The label is absent or its value is not in the set.
    NotIn(String, Vec<String>),
    /// The label is present (any value).
    Exists(String),
    /// The label is absent.
    DoesNotExist(String),
}

impl Requirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Requirement::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
        }
    }
}

/// A validated selector: the ANDed requirements of `matchLabels` and `matchExpressions`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selector {
    /// All requirements; empty means "matches everything".
    pub requirements: Vec<Requirement>,
}

impl Selector {
    /// Validates a wire selector the way the API server would.
    pub fn parse(selector: &LabelSelector) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        for (key, value) in selector.match_labels.iter().flatten() {
            validate_key(key)?;
            validate_value(key, value)?;
            requirements.push(Requirement::In(key.clone(), vec![value.clone()]));
        }
        for (index, expr) in selector.match_expressions.iter().flatten().enumerate() {
            validate_key(&expr.key)?;
            let values = expr.values.clone().unwrap_or_default();
            let op = expr.operator.as_str();
            match op {
                "In" | "NotIn" => {
                    if values.is_empty() {
                        return Err(SelectorError::MissingValues {
                            index,
                            operator: op.to_owned(),
                        });
                    }
                    for v in &values {
                        validate_value(&expr.key, v)?;
                    }
                    let key = expr.key.clone();
                    requirements.push(if op == "In" {
                        Requirement::In(key, values)
                    } else {
                        Requirement::NotIn(key, values)
                    });
                }
                "Exists" | "DoesNotExist" => {
                    if !values.is_empty() {
                        return Err(SelectorError::UnexpectedValues {
                            index,
                            operator: op.to_owned(),
                        });
                    }
                    let key = expr.key.clone();
                    requirements.push(if op == "Exists" {
                        Requirement::Exists(key)
                    } else {
                        Requirement::DoesNotExist(key)
                    });
                }
                _ => {
                    return Err(SelectorError::UnknownOperator {
                        index,
                        operator: op.to_owned(),
                    });
                }
            }
        }
        Ok(Selector { requirements })
    }

    /// Whether an object with these labels is selected.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Whether the selector has no requirement at all (selects everything).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }
}

/// Parses and matches in one step; a selector that does not parse is an error, never a match.
pub fn matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> Result<bool, SelectorError> {
    Ok(Selector::parse(selector)?.matches(labels))
}

/// Whether a wire selector states no requirement (`{}` or only empty lists/maps).
pub fn is_empty_selector(selector: &LabelSelector) -> bool {
    selector.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
        && selector.match_expressions.as_ref().is_none_or(Vec::is_empty)
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.'
}

fn check_name_part(s: &str) -> Result<(), &'static str> {
    if s.is_empty() {
        return Err("name part must not be empty");
    }
    if s.len() > 63 {
        return Err("name part must be at most 63 characters");
    }
    if !s.chars().all(is_name_char) {
        return Err("name part may contain only alphanumerics, '-', '_' and '.'");
    }
    let first_last_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if !first_last_ok(s.chars().next()) || !first_last_ok(s.chars().last()) {
        return Err("name part must start and end with an alphanumeric character");
    }
    Ok(())
}

fn validate_key(key: &str) -> Result<(), SelectorError> {
    let invalid = |reason| SelectorError::InvalidKey {
        key: key.to_owned(),
        reason,
    };
    let name = match key.split_once('/') {
        Some((prefix, name)) => {
            if prefix.is_empty() || prefix.len() > 253 {
                return Err(invalid("prefix must be 1-253 characters"));
            }
            let dns_ok = prefix.split('.').all(|label| {
                !label.is_empty()
                    && label
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                    && !label.starts_with('-')
                    && !label.ends_with('-')
            });
            if !dns_ok {
                return Err(invalid("prefix must be a lowercase DNS subdomain"));
            }
            name
        }
        None => key,
    };
    check_name_part(name).map_err(invalid)
}

fn validate_value(key: &str, value: &str) -> Result<(), SelectorError> {
    if value.is_empty() {
        return Ok(());
    }
    check_name_part(value).map_err(|reason| SelectorError::InvalidValue {
        key: key.to_owned(),
        value: value.to_owned(),
        reason,
    })
}

/// Two node entries of one ConfigMap key that can select the same node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectorOverlap {
    /// Index of the earlier entry (the one that wins at merge time).
    pub first: usize,
    /// Index of the later entry, shadowed on nodes both select.
    pub second: usize,
    /// Labels of a node both entries select.
    pub example_labels: BTreeMap<String, String>,
}

/// Cap on the virtual nodes generated per selector, so hostile input stays cheap.
const MAX_VIRTUAL_NODES: usize = 256;

/// Finds entries whose selectors can select the same node (identical selectors, or one implied
/// by the other), as the upstream ConfigMap webhook does: for every selector build "virtual
/// nodes" from `matchLabels` plus each combination of `In` values (and a placeholder value for
/// `Exists`), then report every pair of entries that one virtual node satisfies.
///
/// Entries are `(index, selector)`; entries whose selector does not parse are skipped (they are
/// reported as invalid elsewhere). Each pair is reported once.
pub fn find_overlaps(entries: &[(usize, &LabelSelector)]) -> Vec<SelectorOverlap> {
    let parsed: Vec<(usize, Selector)> = entries
        .iter()
        .filter_map(|(i, s)| Selector::parse(s).ok().map(|p| (*i, p)))
        .collect();
    let mut found: Vec<SelectorOverlap> = Vec::new();
    for (_, selector) in &parsed {
        for node in virtual_nodes(selector) {
            let matching: Vec<usize> = parsed
                .iter()
                .filter(|(_, s)| s.matches(&node))
                .map(|(i, _)| *i)
                .collect();
            for (a, &first) in matching.iter().enumerate() {
                for &second in &matching[a + 1..] {
                    if !found.iter().any(|o| o.first == first && o.second == second) {
                        found.push(SelectorOverlap {
                            first,
                            second,
                            example_labels: node.clone(),
                        });
                    }
                }
            }
        }
    }
    found.sort_by_key(|o| (o.first, o.second));
    found
}

fn virtual_nodes(selector: &Selector) -> Vec<BTreeMap<String, String>> {
    let mut nodes = vec![BTreeMap::new()];
    for req in &selector.requirements {
        match req {
            Requirement::In(k, vs) => {
                let mut next = Vec::new();
                for node in &nodes {
                    for v in vs {
                        if next.len() >= MAX_VIRTUAL_NODES {
                            break;
                        }
                        let mut n: BTreeMap<String, String> = node.clone();
                        n.insert(k.clone(), v.clone());
                        next.push(n);
                    }
                }
                nodes = next;
            }
            Requirement::Exists(k) => {
                for node in &mut nodes {
                    node.entry(k.clone())
                        .or_insert_with(|| "koord-virtual-node".to_owned());
                }
            }
            Requirement::NotIn(..) | Requirement::DoesNotExist(_) => {}
        }
    }
    nodes.retain(|n| selector.matches(n));
    nodes
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.to_owned(),
            operator: op.to_owned(),
            values: if values.is_empty() {
                None
            } else {
                Some(values.iter().map(|v| (*v).to_owned()).collect())
            },
        }
    }

    fn sel(ml: &[(&str, &str)], me: Vec<LabelSelectorRequirement>) -> LabelSelector {
        LabelSelector {
            match_labels: if ml.is_empty() { None } else { Some(labels(ml)) },
            match_expressions: if me.is_empty() { None } else { Some(me) },
        }
    }

    #[test]
    fn empty_selector_matches_everything() {
        assert_eq!(matches(&LabelSelector::default(), &labels(&[])), Ok(true));
        assert_eq!(
            matches(&LabelSelector::default(), &labels(&[("a", "b")])),
            Ok(true)
        );
        assert!(is_empty_selector(&LabelSelector::default()));
        assert!(!is_empty_selector(&sel(&[("a", "b")], vec![])));
    }

    #[test]
    fn operators_match_like_kubernetes() {
        let node = labels(&[("zone", "a"), ("gpu", "")]);
        let cases = [
            (sel(&[("zone", "a")], vec![]), true),
            (sel(&[("zone", "b")], vec![]), false),
            (sel(&[], vec![expr("zone", "In", &["a", "b"])]), true),
            (sel(&[], vec![expr("zone", "NotIn", &["a"])]), false),
            (sel(&[], vec![expr("missing", "NotIn", &["a"])]), true),
            (sel(&[], vec![expr("gpu", "Exists", &[])]), true),
            (sel(&[], vec![expr("gpu", "DoesNotExist", &[])]), false),
            (sel(&[], vec![expr("other", "DoesNotExist", &[])]), true),
            (
                sel(&[("zone", "a")], vec![expr("gpu", "DoesNotExist", &[])]),
                false,
            ),
        ];
        for (s, want) in cases {
            assert_eq!(matches(&s, &node), Ok(want), "{s:?}");
        }
    }

    #[test]
    fn bad_selectors_are_typed_errors() {
        let node = labels(&[]);
        assert!(matches!(
            matches(&sel(&[], vec![expr("a", "Equals", &["x"])]), &node),
            Err(SelectorError::UnknownOperator { index: 0, .. })
        ));
        assert!(matches!(
            matches(&sel(&[], vec![expr("a", "In", &[])]), &node),
            Err(SelectorError::MissingValues { .. })
        ));
        assert!(matches!(
            matches(&sel(&[], vec![expr("a", "Exists", &["x"])]), &node),
            Err(SelectorError::UnexpectedValues { .. })
        ));
        assert!(matches!(
            matches(&sel(&[("bad key!", "x")], vec![]), &node),
            Err(SelectorError::InvalidKey { .. })
        ));
        assert!(matches!(
            matches(&sel(&[("/x", "x")], vec![]), &node),
            Err(SelectorError::InvalidKey { .. })
        ));
        assert!(matches!(
            matches(&sel(&[("a", "-x")], vec![]), &node),
            Err(SelectorError::InvalidValue { .. })
        ));
        assert_eq!(
            matches(&sel(&[("kubernetes.io/hostname", "node-1")], vec![]), &node),
            Ok(false)
        );
        let long = "a".repeat(64);
        assert!(matches(&sel(&[(long.as_str(), "x")], vec![]), &node).is_err());
    }

    #[test]
    fn overlap_finds_identical_and_implied_selectors() {
        let a = sel(&[("pool", "x")], vec![]);
        let b = sel(&[("pool", "x"), ("gpu", "true")], vec![]);
        let c = sel(&[("pool", "y")], vec![]);
        let d = sel(&[], vec![expr("pool", "In", &["y", "z"])]);
        let e = sel(&[("pool", "x")], vec![]);
        let entries = [(0, &a), (1, &b), (2, &c), (3, &d), (4, &e)];
        let pairs: Vec<(usize, usize)> = find_overlaps(&entries)
            .iter()
            .map(|o| (o.first, o.second))
            .collect();
        assert_eq!(pairs, vec![(0, 1), (0, 4), (1, 4), (2, 3)]);
    }

    #[test]
    fn disjoint_selectors_do_not_overlap() {
        let a = sel(&[], vec![expr("pool", "In", &["a"])]);
        let b = sel(
            &[],
            vec![expr("pool", "NotIn", &["a"]), expr("pool", "Exists", &[])],
        );
        assert!(find_overlaps(&[(0, &a), (1, &b)]).is_empty());
    }
}
