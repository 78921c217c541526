//! CPU normalization: on nodes whose CPUs do more work per core than the cluster's baseline,
//! batch CPU is published larger (`batch-cpu × ratio`) and BE quotas are written smaller
//! (`ceil(quota / ratio)`), so one batch milli-core buys the same work on every node.
//!
//! The ratio comes from `cpu-normalization-config` (by CPU model, hyper-threading and turbo) and
//! the CPU facts koordlet reports in the node's NodeResourceTopology annotation
//! `node.koordinator.sh/cpu-basic-info`. koord-manager writes it on the Node as
//! `node.koordinator.sh/cpu-normalization-ratio` (two decimals), where koordlet reads it.
//!
//! Pure: no I/O; the manager, koordlet and the offline commands share these rules.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::{CpuNormalizationStrategy, ModelRatioCfg};
use crate::names::{ANNOTATION_CPU_NORMALIZATION_RATIO, LABEL_CPU_NORMALIZATION_ENABLED};

/// Smallest ratio upstream accepts (no scaling below the baseline).
pub const MIN_RATIO: f64 = 1.0;
/// Largest ratio upstream accepts.
pub const MAX_RATIO: f64 = 5.0;

/// The CPU facts koordlet reports (upstream's `CPUBasicInfo`, the JSON of the NodeResourceTopology
/// annotation `node.koordinator.sh/cpu-basic-info`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CpuBasicInfo {
    /// `model name` of `/proc/cpuinfo`, the key of `ratioModel`.
    #[serde(default)]
    pub cpu_model: String,
    /// Whether a core runs more than one hardware thread.
    #[serde(default)]
    pub hyper_thread_enabled: bool,
    /// Whether turbo boost is on.
    #[serde(default)]
    pub turbo_enabled: bool,
    /// L3 CAT capacity bitmask (resctrl), when known.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "catL3CbmMask")]
    pub cat_l3_cbm_mask: Option<String>,
    /// `vendor_id` of `/proc/cpuinfo`.
    #[serde(default, rename = "vendorID", skip_serializing_if = "String::is_empty")]
    pub vendor_id: String,
}

impl CpuBasicInfo {
    /// Parses the annotation value.
    pub fn parse(value: &str) -> Result<Self, NormalizationError> {
        serde_json::from_str(value).map_err(|e| NormalizationError::BadBasicInfo(e.to_string()))
    }

    /// The annotation value.
    pub fn to_annotation(&self) -> String {
        // A struct of strings and booleans always serializes.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// A normalization ratio in hundredths, as the annotation carries it (`"1.25"` is 125).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(transparent)]
pub struct NormalizationRatio(u32);

impl NormalizationRatio {
    /// Ratio 1: no scaling.
    pub const ONE: NormalizationRatio = NormalizationRatio(100);

    /// From a configured ratio, rounded to two decimals as upstream formats it; `None` outside
    /// [[`MIN_RATIO`], [`MAX_RATIO`]] or not finite.
    pub fn from_f64(ratio: f64) -> Option<Self> {
        if !ratio.is_finite() || !(MIN_RATIO..=MAX_RATIO).contains(&ratio) {
            return None;
        }
        // In [100, 500] after the range check.
        Some(NormalizationRatio((ratio * 100.0).round() as u32))
    }

    /// Hundredths.
    pub fn hundredths(self) -> u32 {
        self.0
    }

    /// Whether it scales anything (ratio above 1).
    pub fn scales(self) -> bool {
        self.0 > 100
    }

    /// `batch-cpu` published on the Node: `milli × ratio`, truncated (upstream's rule).
    pub fn amplify_milli(self, milli: i64) -> i64 {
        if !self.scales() || milli <= 0 {
            return milli;
        }
        let scaled = i128::from(milli) * i128::from(self.0) / 100;
        i64::try_from(scaled).unwrap_or(i64::MAX)
    }

    /// A CFS quota written for a BE container: `ceil(quota / ratio)`; -1 (unlimited) and
    /// non-positive values stay as they are.
    pub fn shrink_quota(self, quota_us: i64) -> i64 {
        if !self.scales() || quota_us <= 0 {
            return quota_us;
        }
        let q = i128::from(quota_us) * 100;
        let r = i128::from(self.0);
        i64::try_from((q + r - 1) / r).unwrap_or(quota_us)
    }

    /// Parses the Node annotation (`"1.25"`); a value outside [1, 5] is an error.
    pub fn parse(value: &str) -> Result<Self, NormalizationError> {
        let ratio: f64 = value
            .trim()
            .parse()
            .map_err(|_| NormalizationError::BadRatio(value.to_owned()))?;
        Self::from_f64(ratio).ok_or_else(|| NormalizationError::BadRatio(value.to_owned()))
    }

    /// The ratio of a Node's annotations: `Ok(None)` without the annotation.
    pub fn of_node_annotations(
        annotations: Option<&BTreeMap<String, String>>,
    ) -> Result<Option<Self>, NormalizationError> {
        annotations
            .and_then(|a| a.get(ANNOTATION_CPU_NORMALIZATION_RATIO))
            .map(|v| Self::parse(v))
            .transpose()
    }
}

impl Default for NormalizationRatio {
    fn default() -> Self {
        NormalizationRatio::ONE
    }
}

impl std::fmt::Display for NormalizationRatio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{:02}", self.0 / 100, self.0 % 100)
    }
}

/// Why no ratio could be decided.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NormalizationError {
    /// The `cpu-basic-info` annotation is not upstream's JSON.
    #[error("cpu-basic-info annotation does not parse: {0}")]
    BadBasicInfo(String),
    /// The node's NodeResourceTopology (or its `cpu-basic-info` annotation) is missing.
    #[error(
        "no cpu-basic-info reported for this node (NodeResourceTopology missing or without the annotation)"
    )]
    NoBasicInfo,
    /// A ratio annotation that is not a number in [1, 5].
    #[error("cpu normalization ratio {0:?} is not a number in [1, 5]")]
    BadRatio(String),
    /// The node label `node.koordinator.sh/cpu-normalization-enabled` is neither true nor false.
    #[error("label {LABEL_CPU_NORMALIZATION_ENABLED}={0:?} is neither \"true\" nor \"false\"")]
    BadLabel(String),
    /// No `ratioModel` entry for the CPU model and no `defaultRatio`.
    #[error("no ratioModel entry for CPU model {0:?} and no defaultRatio")]
    NoModel(String),
    /// The model's entry lacks the ratio for this hyper-threading/turbo combination.
    #[error("ratioModel entry of CPU model {model:?} has no {field}")]
    NoRatioForMode {
        /// The CPU model.
        model: String,
        /// The missing field (`hyperThreadTurboEnabledRatio`, ...).
        field: &'static str,
    },
    /// The configured ratio is outside [1, 5].
    #[error("configured ratio {0} is outside [1, 5]")]
    OutOfRange(f64),
}

/// The node label switch: `Ok(None)` when unset.
pub fn label_enabled(labels: Option<&BTreeMap<String, String>>) -> Result<Option<bool>, NormalizationError> {
    match labels.and_then(|l| l.get(LABEL_CPU_NORMALIZATION_ENABLED)) {
        None => Ok(None),
        Some(v) => match v.as_str() {
            "true" => Ok(Some(true)),
            "false" => Ok(Some(false)),
            other => Err(NormalizationError::BadLabel(other.to_owned())),
        },
    }
}

/// Whether normalization is on for a node: the node label wins over the (node-merged) strategy.
pub fn enabled(strategy: &CpuNormalizationStrategy, label: Option<bool>) -> bool {
    label.or(strategy.enable).unwrap_or(false)
}

/// The ratio for a node with these CPU facts: the model's entry for its hyper-threading/turbo
/// mode. A model without an entry takes `defaultRatio` (upstream fails instead and leaves the
/// node without a ratio, so a new CPU model silently gets no normalization).
pub fn ratio_for(
    strategy: &CpuNormalizationStrategy,
    info: &CpuBasicInfo,
) -> Result<NormalizationRatio, NormalizationError> {
    let entry = strategy.ratio_model.as_ref().and_then(|m| m.get(&info.cpu_model));
    let ratio = match entry {
        Some(entry) => model_ratio(entry, info)?,
        None => strategy
            .default_ratio
            .ok_or_else(|| NormalizationError::NoModel(info.cpu_model.clone()))?,
    };
    NormalizationRatio::from_f64(ratio).ok_or(NormalizationError::OutOfRange(ratio))
}

fn model_ratio(entry: &ModelRatioCfg, info: &CpuBasicInfo) -> Result<f64, NormalizationError> {
    let (value, field) = match (info.hyper_thread_enabled, info.turbo_enabled) {
        (true, true) => (
            entry.hyper_thread_turbo_enabled_ratio,
            "hyperThreadTurboEnabledRatio",
        ),
        (true, false) => (entry.hyper_thread_enabled_ratio, "hyperThreadEnabledRatio"),
        (false, true) => (entry.turbo_enabled_ratio, "turboEnabledRatio"),
        (false, false) => (entry.base_ratio, "baseRatio"),
    };
    value.ok_or_else(|| NormalizationError::NoRatioForMode {
        model: info.cpu_model.clone(),
        field,
    })
}

/// What the manager decides for a node's ratio annotation.
#[derive(Debug, Clone, PartialEq)]
pub enum RatioDecision {
    /// Normalization is off: the annotation says `1.00` (as upstream writes it).
    Disabled,
    /// Normalization is on with this ratio.
    Ratio(NormalizationRatio),
    /// On, but no ratio can be decided: the annotation is left as it is and batch-cpu is not
    /// scaled by a ratio this process did not decide.
    Unknown(NormalizationError),
}

impl RatioDecision {
    /// The annotation value to write, if any.
    pub fn annotation(&self) -> Option<NormalizationRatio> {
        match self {
            RatioDecision::Disabled => Some(NormalizationRatio::ONE),
            RatioDecision::Ratio(r) => Some(*r),
            RatioDecision::Unknown(_) => None,
        }
    }
}

/// Decides a node's ratio from the strategy merged for it, its labels and its reported CPU facts
/// (`basic_info`: the NodeResourceTopology's `cpu-basic-info` annotation, if any).
pub fn decide(
    strategy: &CpuNormalizationStrategy,
    labels: Option<&BTreeMap<String, String>>,
    basic_info: Option<&str>,
) -> RatioDecision {
    let label = match label_enabled(labels) {
        Ok(label) => label,
        Err(e) => return RatioDecision::Unknown(e),
    };
    if !enabled(strategy, label) {
        return RatioDecision::Disabled;
    }
    let info = match basic_info.map(CpuBasicInfo::parse) {
        None => return RatioDecision::Unknown(NormalizationError::NoBasicInfo),
        Some(Err(e)) => return RatioDecision::Unknown(e),
        Some(Ok(info)) => info,
    };
    match ratio_for(strategy, &info) {
        Ok(r) => RatioDecision::Ratio(r),
        Err(e) => RatioDecision::Unknown(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strategy(enable: Option<bool>) -> CpuNormalizationStrategy {
        serde_json::from_value(serde_json::json!({
            "enable": enable,
            "ratioModel": {
                "Intel(R) Xeon(R) Platinum 8269CY CPU @ 2.50GHz": {
                    "baseRatio": 1.29,
                    "hyperThreadEnabledRatio": 0.82,
                    "turboEnabledRatio": 1.52,
                    "hyperThreadTurboEnabledRatio": 1.0
                },
                "CPU B": { "baseRatio": 1.5, "turboEnabledRatio": 1.8 }
            }
        }))
        .unwrap()
    }

    fn info(model: &str, ht: bool, turbo: bool) -> String {
        CpuBasicInfo {
            cpu_model: model.into(),
            hyper_thread_enabled: ht,
            turbo_enabled: turbo,
            cat_l3_cbm_mask: None,
            vendor_id: "GenuineIntel".into(),
        }
        .to_annotation()
    }

    const M: &str = "Intel(R) Xeon(R) Platinum 8269CY CPU @ 2.50GHz";

    #[test]
    fn each_mode_picks_its_ratio() {
        let s = strategy(Some(true));
        let r = |ht, turbo| decide(&s, None, Some(&info(M, ht, turbo)));
        assert_eq!(r(false, false), RatioDecision::Ratio(NormalizationRatio(129)));
        assert_eq!(r(false, true), RatioDecision::Ratio(NormalizationRatio(152)));
        assert_eq!(r(true, true), RatioDecision::Ratio(NormalizationRatio::ONE));
        // 0.82 is below the minimum: refused, the annotation is left alone.
        assert_eq!(
            r(true, false),
            RatioDecision::Unknown(NormalizationError::OutOfRange(0.82))
        );
        assert_eq!(
            decide(&s, None, Some(&info("CPU B", true, false))),
            RatioDecision::Unknown(NormalizationError::NoRatioForMode {
                model: "CPU B".into(),
                field: "hyperThreadEnabledRatio"
            })
        );
    }

    #[test]
    fn label_wins_over_the_strategy() {
        let mut labels = BTreeMap::new();
        labels.insert(LABEL_CPU_NORMALIZATION_ENABLED.to_owned(), "false".to_owned());
        let on = strategy(Some(true));
        assert_eq!(
            decide(&on, Some(&labels), Some(&info(M, false, false))),
            RatioDecision::Disabled
        );
        labels.insert(LABEL_CPU_NORMALIZATION_ENABLED.to_owned(), "true".to_owned());
        let off = strategy(None);
        assert_eq!(
            decide(&off, Some(&labels), Some(&info(M, false, false))),
            RatioDecision::Ratio(NormalizationRatio(129))
        );
        assert_eq!(
            decide(&off, None, Some(&info(M, false, false))),
            RatioDecision::Disabled
        );
        labels.insert(LABEL_CPU_NORMALIZATION_ENABLED.to_owned(), "yes".to_owned());
        assert!(matches!(
            decide(&on, Some(&labels), None),
            RatioDecision::Unknown(NormalizationError::BadLabel(_))
        ));
    }

    #[test]
    fn missing_or_bad_basic_info_leaves_the_annotation() {
        let s = strategy(Some(true));
        assert_eq!(
            decide(&s, None, None),
            RatioDecision::Unknown(NormalizationError::NoBasicInfo)
        );
        assert!(matches!(
            decide(&s, None, Some("{]")),
            RatioDecision::Unknown(NormalizationError::BadBasicInfo(_))
        ));
        assert_eq!(decide(&s, None, None).annotation(), None);
        assert_eq!(
            RatioDecision::Disabled.annotation(),
            Some(NormalizationRatio::ONE)
        );
    }

    #[test]
    fn unknown_model_takes_the_default_ratio() {
        let mut s = strategy(Some(true));
        assert_eq!(
            decide(&s, None, Some(&info("new CPU", false, false))),
            RatioDecision::Unknown(NormalizationError::NoModel("new CPU".into()))
        );
        s.default_ratio = Some(1.1);
        assert_eq!(
            decide(&s, None, Some(&info("new CPU", false, false))),
            RatioDecision::Ratio(NormalizationRatio(110))
        );
    }

    #[test]
    fn upstream_basic_info_parses() {
        let parsed = CpuBasicInfo::parse(
            r#"{"cpuModel": "CPU A 2.50GHz", "hyperThreadEnabled": true, "turboEnabled": false, "vendorID": "unknown"}"#,
        )
        .unwrap();
        assert_eq!(parsed.cpu_model, "CPU A 2.50GHz");
        assert!(parsed.hyper_thread_enabled && !parsed.turbo_enabled);
        assert_eq!(parsed.vendor_id, "unknown");
        assert_eq!(CpuBasicInfo::parse(&parsed.to_annotation()).unwrap(), parsed);
    }

    #[test]
    fn ratio_format_and_arithmetic() {
        let r = NormalizationRatio::parse("1.25").unwrap();
        assert_eq!(r.to_string(), "1.25");
        assert_eq!(NormalizationRatio::ONE.to_string(), "1.00");
        assert_eq!(NormalizationRatio::from_f64(1.2).unwrap().to_string(), "1.20");
        assert!(NormalizationRatio::parse("0.9").is_err());
        assert!(NormalizationRatio::parse("5.01").is_err());
        assert!(NormalizationRatio::parse("NaN").is_err());
        assert!(NormalizationRatio::parse("x").is_err());
        // batch-cpu 25000 × 1.25, truncated; quota ceil(50000 / 1.25) = 40000, ceil(10001/1.25) = 8001.
        assert_eq!(r.amplify_milli(25_000), 31_250);
        assert_eq!(NormalizationRatio(133).amplify_milli(1_001), 1_331);
        assert_eq!(r.shrink_quota(50_000), 40_000);
        assert_eq!(r.shrink_quota(10_001), 8_001);
        assert_eq!(r.shrink_quota(-1), -1);
        assert_eq!(NormalizationRatio::ONE.shrink_quota(50_000), 50_000);
        assert_eq!(NormalizationRatio::ONE.amplify_milli(25_000), 25_000);
        assert_eq!(NormalizationRatio(500).amplify_milli(i64::MAX), i64::MAX);
    }
}
