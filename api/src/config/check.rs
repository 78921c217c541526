//! The error collector the validation rules write into, and the walk over a key's cluster
//! strategy and node entries.

use super::ConfigKey;
use super::error::{ConfigError, Rule};
use super::layer::Layered;
use crate::selector::Selector;

/// Collects errors under a path prefix.
pub(crate) struct Check<'a> {
    pub(crate) key: ConfigKey,
    pub(crate) base: String,
    pub(crate) errors: &'a mut Vec<ConfigError>,
}

impl Check<'_> {
    pub(crate) fn path(&self, field: &str) -> String {
        match (self.base.is_empty(), field.is_empty()) {
            (true, _) => field.to_owned(),
            (false, true) => self.base.clone(),
            (false, false) if field.starts_with('[') => format!("{}{field}", self.base),
            (false, false) => format!("{}.{field}", self.base),
        }
    }

    pub(crate) fn push(&mut self, field: &str, rule: Rule) {
        let path = self.path(field);
        self.errors.push(ConfigError::new(self.key, path, rule));
    }

    pub(crate) fn sub(&mut self, field: &str) -> Check<'_> {
        Check {
            key: self.key,
            base: self.path(field),
            errors: self.errors,
        }
    }

    /// `min <= v <= max` for whichever bounds are given.
    pub(crate) fn range(&mut self, field: &str, v: Option<i64>, min: Option<i64>, max: Option<i64>) {
        let Some(value) = v else { return };
        if let Some(min) = min.filter(|m| value < *m) {
            self.push(field, Rule::Below { value, min });
        } else if let Some(max) = max.filter(|m| value > *m) {
            self.push(field, Rule::Above { value, max });
        }
    }

    /// `lower < upper`; with `both_or_neither`, one without the other is an error too.
    pub(crate) fn pair(
        &mut self,
        (lower_f, lower): (&'static str, Option<i64>),
        (upper_f, upper): (&'static str, Option<i64>),
        both_or_neither: bool,
    ) {
        match (lower, upper) {
            (Some(l), Some(u)) if l >= u => self.push(
                lower_f,
                Rule::NotBelow {
                    value: l,
                    other: upper_f,
                    other_value: u,
                },
            ),
            (Some(_), None) if both_or_neither => self.push(lower_f, Rule::PairIncomplete { other: upper_f }),
            (None, Some(_)) if both_or_neither => self.push(upper_f, Rule::PairIncomplete { other: lower_f }),
            _ => {}
        }
    }

    pub(crate) fn one_of(&mut self, field: &str, v: Option<&str>, allowed: &'static str) {
        if let Some(v) = v
            && !allowed.split(", ").any(|a| a == v)
        {
            self.push(
                field,
                Rule::NotOneOf {
                    value: v.to_owned(),
                    allowed,
                },
            );
        }
    }

    pub(crate) fn float_range(
        &mut self,
        field: &str,
        v: Option<f64>,
        ok: impl Fn(f64) -> bool,
        range: &'static str,
    ) {
        if let Some(value) = v
            && !(value.is_finite() && ok(value))
        {
            self.push(field, Rule::OutOfRange { value, range });
        }
    }
}

/// Validates the cluster strategy and each node entry; node-entry errors that merely repeat
/// an error of the cluster strategy (inherited values) are not reported twice. Node selectors
/// that do not parse are errors.
pub(crate) fn layered<S>(
    key: ConfigKey,
    l: &Layered<S>,
    mut rules: impl FnMut(&S, &mut Check<'_>, bool),
) -> Vec<ConfigError> {
    let mut cluster_errors = Vec::new();
    rules(
        &l.cluster,
        &mut Check {
            key,
            base: key.cluster_path().to_owned(),
            errors: &mut cluster_errors,
        },
        true,
    );
    let strip = |path: &str, base: &str| -> String {
        path.strip_prefix(base)
            .unwrap_or(path)
            .trim_start_matches('.')
            .to_owned()
    };
    let seen: Vec<(String, Rule)> = cluster_errors
        .iter()
        .map(|e| (strip(&e.path, key.cluster_path()), e.rule.clone()))
        .collect();
    let mut errors = cluster_errors;
    for entry in &l.nodes {
        let base = format!("{}[{}]", key.nodes_field(), entry.index);
        if let Some(sel) = &entry.node_selector
            && let Err(e) = Selector::parse(sel)
        {
            errors.push(ConfigError::new(
                key,
                format!("{base}.nodeSelector"),
                Rule::InvalidSelector(e.to_string()),
            ));
        }
        let mut node_errors = Vec::new();
        rules(
            &entry.strategy,
            &mut Check {
                key,
                base: base.clone(),
                errors: &mut node_errors,
            },
            false,
        );
        errors.extend(
            node_errors
                .into_iter()
                .filter(|e| !seen.contains(&(strip(&e.path, &base), e.rule.clone()))),
        );
    }
    errors
}
