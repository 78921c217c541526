//! Semantic validation of every key: ranges, paired fields, enums, formats. Runs on the merged
//! cluster strategy, on every merged node entry and on every pod strategy, so what passes is
//! what nodes will really get. Rules are upstream's `validate` tags unless a comment says why.

use super::ConfigKey;
use super::colocation::{CalculatePolicy, ColocationStrategy};
use super::error::{ConfigError, Rule};
use super::layer::Layered;
use super::syntax::{go_duration_seconds, is_non_negative_quantity};
use super::types::{CpuNormalizationStrategy, ResourceAmplificationStrategy};
use crate::nodeslo::{
    CpuBurstConfig, CpuBurstStrategy, HostApplicationSpec, NodeSLOSpec, ResourceThresholdStrategy,
    SystemStrategy,
};
use crate::selector::{Selector, SelectorOverlap, find_overlaps, is_empty_selector};

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

    fn one_of(&mut self, field: &str, v: Option<&str>, allowed: &'static str) {
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

    fn float_range(&mut self, field: &str, v: Option<f64>, ok: impl Fn(f64) -> bool, range: &'static str) {
        if let Some(value) = v
            && !(value.is_finite() && ok(value))
        {
            self.push(field, Rule::OutOfRange { value, range });
        }
    }
}

const PCT: (Option<i64>, Option<i64>) = (Some(0), Some(100));

/// Rules of `resource-threshold-config`.
pub(crate) fn threshold(s: &ResourceThresholdStrategy, c: &mut Check<'_>) {
    for (f, v) in [
        ("cpuSuppressThresholdPercent", s.cpu_suppress_threshold_percent),
        ("cpuSuppressMinPercent", s.cpu_suppress_min_percent),
        ("memoryEvictThresholdPercent", s.memory_evict_threshold_percent),
        ("memoryEvictLowerPercent", s.memory_evict_lower_percent),
        (
            "cpuEvictBESatisfactionUpperPercent",
            s.cpu_evict_be_satisfaction_upper_percent,
        ),
        (
            "cpuEvictBESatisfactionLowerPercent",
            s.cpu_evict_be_satisfaction_lower_percent,
        ),
        (
            "cpuEvictBEUsageThresholdPercent",
            s.cpu_evict_be_usage_threshold_percent,
        ),
        ("cpuEvictThresholdPercent", s.cpu_evict_threshold_percent),
        ("cpuEvictLowerPercent", s.cpu_evict_lower_percent),
    ] {
        c.range(f, v, PCT.0, PCT.1);
    }
    for (f, v) in [
        (
            "memoryAllocatableEvictThresholdPercent",
            s.memory_allocatable_evict_threshold_percent,
        ),
        (
            "memoryAllocatableEvictLowerPercent",
            s.memory_allocatable_evict_lower_percent,
        ),
        (
            "cpuAllocatableEvictThresholdPercent",
            s.cpu_allocatable_evict_threshold_percent,
        ),
        (
            "cpuAllocatableEvictLowerPercent",
            s.cpu_allocatable_evict_lower_percent,
        ),
    ] {
        c.range(f, v, Some(0), None);
    }
    c.range(
        "cpuEvictTimeWindowSeconds",
        s.cpu_evict_time_window_seconds,
        Some(1),
        None,
    );
    c.range(
        "allocatableEvictPriorityThreshold",
        s.allocatable_evict_priority_threshold.map(i64::from),
        Some(0),
        Some(7999),
    );
    // The memory threshold has a built-in default, so its lower bound is optional.
    c.pair(
        ("memoryEvictLowerPercent", s.memory_evict_lower_percent),
        ("memoryEvictThresholdPercent", s.memory_evict_threshold_percent),
        false,
    );
    c.pair(
        (
            "memoryAllocatableEvictLowerPercent",
            s.memory_allocatable_evict_lower_percent,
        ),
        (
            "memoryAllocatableEvictThresholdPercent",
            s.memory_allocatable_evict_threshold_percent,
        ),
        false,
    );
    c.pair(
        (
            "cpuEvictBESatisfactionLowerPercent",
            s.cpu_evict_be_satisfaction_lower_percent,
        ),
        (
            "cpuEvictBESatisfactionUpperPercent",
            s.cpu_evict_be_satisfaction_upper_percent,
        ),
        true,
    );
    c.pair(
        ("cpuEvictLowerPercent", s.cpu_evict_lower_percent),
        ("cpuEvictThresholdPercent", s.cpu_evict_threshold_percent),
        true,
    );
    c.pair(
        (
            "cpuAllocatableEvictLowerPercent",
            s.cpu_allocatable_evict_lower_percent,
        ),
        (
            "cpuAllocatableEvictThresholdPercent",
            s.cpu_allocatable_evict_threshold_percent,
        ),
        true,
    );
}

/// Rules of a burst config (node strategy, pod strategy or pod annotation).
pub(crate) fn burst_config(s: &CpuBurstConfig, c: &mut Check<'_>) {
    // The CRD allows 0; the ConfigMap webhook requires 1-10000 (0 would disable burst silently).
    c.range("cpuBurstPercent", s.cpu_burst_percent, Some(1), Some(10000));
    c.range("cfsQuotaBurstPercent", s.cfs_quota_burst_percent, Some(100), None);
    c.range(
        "cfsQuotaBurstPeriodSeconds",
        s.cfs_quota_burst_period_seconds,
        Some(-1),
        None,
    );
}

/// Rules of `cpu-burst-config` for one strategy; pod strategies are checked under
/// `pods_base` (the top-level `podStrategies` path when they came from there).
pub(crate) fn burst(s: &CpuBurstStrategy, c: &mut Check<'_>, pods_base: Option<&str>) {
    burst_config(&s.config(), c);
    c.range(
        "sharePoolThresholdPercent",
        s.share_pool_threshold_percent,
        PCT.0,
        PCT.1,
    );
    let base = match pods_base {
        Some(b) => b.to_owned(),
        None => c.path("podStrategies"),
    };
    for (i, pod) in s.pod_strategies.iter().flatten().enumerate() {
        let mut pc = Check {
            key: c.key,
            base: format!("{base}[{i}]"),
            errors: c.errors,
        };
        if let Some(sel) = &pod.pod_selector
            && let Err(e) = Selector::parse(sel)
        {
            pc.push("podSelector", Rule::InvalidSelector(e.to_string()));
        }
        if let Some(cfg) = &pod.cpu_burst_config {
            burst_config(cfg, &mut pc.sub("cpuBurstConfig"));
        }
    }
}

/// Validates a pod's burst config (e.g. from the `koordinator.sh/cpuBurst` annotation).
pub fn validate_cpu_burst_config(cfg: &CpuBurstConfig) -> Vec<ConfigError> {
    let mut errors = Vec::new();
    burst_config(
        cfg,
        &mut Check {
            key: ConfigKey::CpuBurst,
            base: String::new(),
            errors: &mut errors,
        },
    );
    errors
}

/// Validates a NodeSLO spec with the ConfigMap rules of each part (koordlet may check what it
/// receives; tests check that merging never leaves the valid range). Paths start at the part.
pub fn validate_node_slo_spec(spec: &NodeSLOSpec) -> Vec<ConfigError> {
    let mut errors = Vec::new();
    if let Some(s) = &spec.resource_used_threshold_with_be {
        threshold(
            s,
            &mut Check {
                key: ConfigKey::ResourceThreshold,
                base: "resourceUsedThresholdWithBE".to_owned(),
                errors: &mut errors,
            },
        );
    }
    if let Some(s) = &spec.resource_qos_strategy {
        super::validate_qos::resource_qos(
            s,
            &mut Check {
                key: ConfigKey::ResourceQos,
                base: "resourceQOSStrategy".to_owned(),
                errors: &mut errors,
            },
        );
    }
    if let Some(s) = &spec.cpu_burst_strategy {
        burst(
            s,
            &mut Check {
                key: ConfigKey::CpuBurst,
                base: "cpuBurstStrategy".to_owned(),
                errors: &mut errors,
            },
            None,
        );
    }
    if let Some(s) = &spec.system_strategy {
        system(
            s,
            &mut Check {
                key: ConfigKey::System,
                base: "systemStrategy".to_owned(),
                errors: &mut errors,
            },
        );
    }
    if let Some(apps) = &spec.host_applications {
        host_applications(
            apps,
            &mut Check {
                key: ConfigKey::HostApplication,
                base: "hostApplications".to_owned(),
                errors: &mut errors,
            },
        );
    }
    errors
}

/// Validates one colocation strategy (e.g. a node's effective one) with the ConfigMap rules.
pub fn validate_colocation_strategy(s: &ColocationStrategy) -> Vec<ConfigError> {
    let mut errors = Vec::new();
    colocation(
        s,
        &mut Check {
            key: ConfigKey::Colocation,
            base: String::new(),
            errors: &mut errors,
        },
    );
    errors
}

/// Rules of `system-config`.
pub(crate) fn system(s: &SystemStrategy, c: &mut Check<'_>) {
    c.range("minFreeKbytesFactor", s.min_free_kbytes_factor, Some(1), None);
    c.range(
        "watermarkScaleFactor",
        s.watermark_scale_factor,
        Some(1),
        Some(400),
    );
    c.range("memcgReapBackGround", s.memcg_reap_back_ground, Some(0), Some(1));
    c.range(
        "schedGroupIdentityEnabled",
        s.sched_group_identity_enabled,
        Some(0),
        Some(1),
    );
    c.range(
        "pageCacheLimitEnabled",
        s.page_cache_limit_enabled,
        Some(0),
        Some(1),
    );
    if !is_non_negative_quantity(&s.total_network_bandwidth.0) {
        c.push(
            "totalNetworkBandwidth",
            Rule::InvalidQuantity {
                value: s.total_network_bandwidth.0.clone(),
            },
        );
    }
}

/// Rules of `colocation-config`.
pub(crate) fn colocation(s: &ColocationStrategy, c: &mut Check<'_>) {
    c.range(
        "metricAggregateDurationSeconds",
        s.metric_aggregate_duration_seconds,
        Some(1),
        None,
    );
    c.range(
        "metricReportIntervalSeconds",
        s.metric_report_interval_seconds,
        Some(1),
        None,
    );
    c.one_of(
        "metricMemoryCollectPolicy",
        s.metric_memory_collect_policy.as_deref(),
        "usageWithoutPageCache, usageWithHotPageCache, usageWithPageCache",
    );
    c.range(
        "cpuReclaimThresholdPercent",
        s.cpu_reclaim_threshold_percent,
        Some(0),
        None,
    );
    c.range(
        "memoryReclaimThresholdPercent",
        s.memory_reclaim_threshold_percent,
        Some(0),
        None,
    );
    if s.cpu_calculate_policy == Some(CalculatePolicy::Request) {
        c.push(
            "cpuCalculatePolicy",
            Rule::NotOneOf {
                value: "request".to_owned(),
                allowed: "usage, maxUsageRequest",
            },
        );
    }
    c.range("degradeTimeMinutes", s.degrade_time_minutes, Some(1), None);
    c.range(
        "updateTimeThresholdSeconds",
        s.update_time_threshold_seconds,
        Some(1),
        None,
    );
    c.float_range(
        "resourceDiffThreshold",
        s.resource_diff_threshold,
        |v| v > 0.0 && v <= 1.0,
        "(0, 1]",
    );
    c.one_of("midReclaimMode", s.mid_reclaim_mode.as_deref(), "static");
    for (f, v) in [
        ("midCPUThresholdPercent", s.mid_cpu_threshold_percent),
        ("midMemoryThresholdPercent", s.mid_memory_threshold_percent),
        ("midUnallocatedPercent", s.mid_unallocated_percent),
        ("midStaticCPUReservedPercent", s.mid_static_cpu_reserved_percent),
        (
            "midStaticMemoryReservedPercent",
            s.mid_static_memory_reserved_percent,
        ),
    ] {
        c.range(f, v, PCT.0, PCT.1);
    }
    c.range(
        "batchCPUThresholdPercent",
        s.batch_cpu_threshold_percent,
        Some(0),
        None,
    );
    c.range(
        "batchMemoryThresholdPercent",
        s.batch_memory_threshold_percent,
        Some(0),
        None,
    );
    let durations = s
        .metric_aggregate_policy
        .as_ref()
        .and_then(|p| p.durations.as_ref());
    for (i, d) in durations.into_iter().flatten().enumerate() {
        if go_duration_seconds(d).is_none_or(|secs| secs <= 0.0) {
            c.push(
                &format!("metricAggregatePolicy.durations[{i}]"),
                Rule::InvalidDuration { value: d.clone() },
            );
        }
    }
}

/// Rules of `cpu-normalization-config`: ratios in [1, 5] (upstream's normalization bounds).
pub(crate) fn cpu_normalization(s: &CpuNormalizationStrategy, c: &mut Check<'_>) {
    let ok = |v: f64| (1.0..=5.0).contains(&v);
    c.float_range("defaultRatio", s.default_ratio, ok, "[1, 5]");
    for (model, r) in s.ratio_model.iter().flatten() {
        let mut mc = c.sub(&format!("ratioModel.{model}"));
        mc.float_range("baseRatio", r.base_ratio, ok, "[1, 5]");
        mc.float_range(
            "hyperThreadEnabledRatio",
            r.hyper_thread_enabled_ratio,
            ok,
            "[1, 5]",
        );
        mc.float_range("turboEnabledRatio", r.turbo_enabled_ratio, ok, "[1, 5]");
        mc.float_range(
            "hyperThreadTurboEnabledRatio",
            r.hyper_thread_turbo_enabled_ratio,
            ok,
            "[1, 5]",
        );
    }
}

/// Rules of `resource-amplification-config`: every ratio >= 1 (amplification never shrinks).
pub(crate) fn resource_amplification(s: &ResourceAmplificationStrategy, c: &mut Check<'_>) {
    for (name, r) in s.resource_amplification_ratio.iter().flatten() {
        c.float_range(
            &format!("resourceAmplificationRatio.{name}"),
            Some(*r),
            |v| v >= 1.0,
            "[1, +inf)",
        );
    }
}

/// Rules of `host-application-config` for one list.
pub(crate) fn host_applications(apps: &[HostApplicationSpec], c: &mut Check<'_>) {
    for (i, app) in apps.iter().enumerate() {
        let mut ac = c.sub(&format!("[{i}]"));
        if app.name.is_empty() {
            ac.push(
                "name",
                Rule::NotOneOf {
                    value: String::new(),
                    allowed: "a non-empty name",
                },
            );
        }
        ac.one_of("qos", app.qos.as_deref(), "LSE, LSR, LS, BE, SYSTEM");
        ac.one_of(
            "priority",
            app.priority.as_deref(),
            "koord-prod, koord-mid, koord-batch, koord-free",
        );
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

/// Problems of node entries that only the admission webhook rejects (the manager tolerates
/// them with upstream's semantics): an entry without a selector or with an empty one, and
/// entries whose selectors can select the same node (the later one would be shadowed).
pub fn node_entry_problems<S>(key: ConfigKey, l: &Layered<S>) -> (Vec<ConfigError>, Vec<SelectorOverlap>) {
    let mut errors = Vec::new();
    for entry in &l.nodes {
        if entry.node_selector.as_ref().is_none_or(is_empty_selector) {
            let path = format!("{}[{}].nodeSelector", key.nodes_field(), entry.index);
            errors.push(ConfigError::new(key, path, Rule::EmptySelector));
        }
    }
    (errors, find_overlaps(&l.selectors()))
}
