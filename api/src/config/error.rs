//! Typed errors and warnings of the `slo-controller-config` ConfigMap.
//!
//! Every message names the ConfigMap key, the field path and the rule, so that the webhook can
//! return it verbatim and the manager can put it into a Warning Event without rewording.

use std::fmt;

use thiserror::Error;

use super::ConfigKey;

/// The rule a value breaks.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum Rule {
    /// The value is not JSON at all.
    #[error("invalid JSON: {0}")]
    InvalidJson(String),
    /// The top level (or a node entry) is not a JSON object.
    #[error("expected a JSON object, found {0}")]
    NotAnObject(&'static str),
    /// A field has the wrong JSON type or an unknown enum value.
    #[error("{0}")]
    WrongType(String),
    /// An integer above its maximum.
    #[error("{value} is above {max}")]
    Above {
        /// The value given.
        value: i64,
        /// The largest allowed value.
        max: i64,
    },
    /// An integer below its minimum.
    #[error("{value} is below {min}")]
    Below {
        /// The value given.
        value: i64,
        /// The smallest allowed value.
        min: i64,
    },
    /// A number outside its interval (for non-integers or open bounds).
    #[error("{value} is not in {range}")]
    OutOfRange {
        /// The value given.
        value: f64,
        /// The interval, e.g. `(0, 1]`.
        range: &'static str,
    },
    /// One field of a pair is set and the other is not.
    #[error("is set but {other} is not (set both or neither)")]
    PairIncomplete {
        /// The field that is missing.
        other: &'static str,
    },
    /// A lower bound is not below its upper bound.
    #[error("{value} must be below {other} ({other_value})")]
    NotBelow {
        /// The value given.
        value: i64,
        /// The field it must stay below.
        other: &'static str,
        /// That field's value.
        other_value: i64,
    },
    /// A string that is not one of the allowed values.
    #[error("{value:?} is not one of {allowed}")]
    NotOneOf {
        /// The value given.
        value: String,
        /// The allowed values, comma separated.
        allowed: &'static str,
    },
    /// A label selector that does not parse.
    #[error("invalid selector: {0}")]
    InvalidSelector(String),
    /// A node entry without any selector requirement.
    #[error("must not be empty: set matchLabels or matchExpressions")]
    EmptySelector,
    /// A node entry without a name while names are required (`--node-strategy-name-need-check`).
    #[error("must be set: node entries need a unique name")]
    NameMissing,
    /// Two node entries with the same name.
    #[error("{name:?} is already the name of entry {first}")]
    NameDuplicate {
        /// The repeated name.
        name: String,
        /// Index of the first entry with that name.
        first: usize,
    },
    /// A Kubernetes quantity that does not parse or is negative.
    #[error("{value:?} is not a valid non-negative quantity")]
    InvalidQuantity {
        /// The value given.
        value: String,
    },
    /// A Go duration (`5m`, `1h30m`) that does not parse or is not positive.
    #[error("{value:?} is not a positive duration such as 5m or 1h30m")]
    InvalidDuration {
        /// The value given.
        value: String,
    },
    /// Network values mixing percentages and quantities in one strategy.
    #[error("mixes percentages (integers) and quantities (strings); use one format per strategy")]
    MixedNetworkFormats,
    /// A sum of percentages above 100.
    #[error("sum of {what} is {sum}, above 100")]
    SumAbove100 {
        /// What was summed.
        what: &'static str,
        /// The sum.
        sum: i64,
    },
    /// A sum of bandwidth quantities above the node's total network bandwidth.
    #[error(
        "sum of {what} is {sum}, above totalNetworkBandwidth {total} of the system-config strategy for these nodes"
    )]
    SumAboveTotalBandwidth {
        /// What was summed.
        what: &'static str,
        /// The sum, in units (bits or bytes per second, as the config writes them).
        sum: i64,
        /// The `totalNetworkBandwidth` it is checked against, in the same units.
        total: i64,
    },
}

/// One problem in one ConfigMap key: the key, the field path inside its JSON, and the rule.
#[derive(Debug, Clone, PartialEq, Error)]
pub struct ConfigError {
    /// The ConfigMap key holding the bad value.
    pub key: ConfigKey,
    /// Field path inside the key's JSON, e.g. `clusterStrategy.cpuSuppressThresholdPercent`;
    /// empty when the whole value is at fault.
    pub path: String,
    /// The rule broken.
    pub rule: Rule,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}: {}", self.key, self.rule)
        } else {
            write!(f, "{}: {}: {}", self.key, self.path, self.rule)
        }
    }
}

impl ConfigError {
    /// Builds an error for `key` at `path`.
    pub fn new(key: ConfigKey, path: impl Into<String>, rule: Rule) -> Self {
        ConfigError {
            key,
            path: path.into(),
            rule,
        }
    }
}

/// All problems of one ConfigMap key; the key is unusable while any is present.
#[derive(Debug, Clone, PartialEq, Error)]
pub struct KeyError {
    /// The broken key.
    pub key: ConfigKey,
    /// Every problem found, in document order where possible.
    pub errors: Vec<ConfigError>,
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for e in &self.errors {
            if !first {
                f.write_str("; ")?;
            }
            first = false;
            write!(f, "{e}")?;
        }
        if first {
            write!(f, "{}: invalid", self.key)?;
        }
        Ok(())
    }
}

/// Something tolerated but worth telling the user: the config still works.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WarningKind {
    /// A field no type knows; ignored, as upstream's encoding/json ignores it.
    UnknownField,
    /// A ConfigMap key that is not one of the known keys (often a typo); ignored.
    UnknownKey,
    /// The same field spelled twice with different case; the exact spelling won.
    DuplicateField {
        /// The spelling that was used.
        kept: String,
    },
}

/// A warning with its location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigWarning {
    /// The ConfigMap key as written (may be an unknown key).
    pub key: String,
    /// Field path inside the key's JSON; empty for key-level warnings.
    pub path: String,
    /// What was tolerated.
    pub kind: WarningKind,
}

impl fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            WarningKind::UnknownField => write!(f, "{}: {}: unknown field, ignored", self.key, self.path),
            WarningKind::UnknownKey => write!(f, "{}: unknown ConfigMap key, ignored", self.key),
            WarningKind::DuplicateField { kept } => {
                write!(
                    f,
                    "{}: {}: duplicate of field {kept:?} (case differs), ignored",
                    self.key, self.path
                )
            }
        }
    }
}
