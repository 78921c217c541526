//! Semantic validation of every key: ranges, paired fields, enums, formats. Runs on the merged
//! cluster strategy, on every merged node entry and on every pod strategy, so what passes is
//! what nodes will really get. Rules are upstream's `validate` tags unless a comment says why.

pub(crate) use super::check::Check;
use super::colocation::{CalculatePolicy, ColocationStrategy};
use super::error::Rule;
use super::syntax::is_non_negative_quantity;
use super::types::{CpuNormalizationStrategy, ResourceAmplificationStrategy};
use crate::duration::parse_go_duration;
use crate::nodeslo::{
    CpuBurstConfig, CpuBurstStrategy, HostApplicationSpec, ResourceThresholdStrategy, SystemStrategy,
};
use crate::selector::Selector;

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
        if !parse_go_duration(d).is_ok_and(|d| !d.is_zero()) {
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
