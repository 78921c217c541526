//! What a tick observed and the log line of its decision.

use koordlet_core::strategies::cpu_suppress::STRATEGY;
use koordlet_core::strategies::fast_suppress::{CounterSample, CpusetSize, FastAction};
use koordlet_core::strategies::settle::SuppressMode;
use tracing::info;

/// What one tick decides on besides the node figures and the strategy.
#[derive(Debug, Clone, Copy)]
pub(super) struct Observation {
    /// The counters.
    pub sample: CounterSample,
    /// The policy in force.
    pub mode: SuppressMode,
    /// The besteffort quota now (`None`: unreadable).
    pub current_quota_us: Option<i64>,
    /// The besteffort cpuset size (policy `cpuset` with the BE tree known).
    pub cpus: Option<CpusetSize>,
}

/// Logs a decision that writes, with the figures behind it, before it is applied.
pub(super) fn log_action(action: &FastAction, seen: &Observation, has_scope: bool, dry_run: bool) {
    match action {
        FastAction::SetQuota {
            decision,
            quota_us,
            budget,
            usage,
        } => info!(
            strategy = STRATEGY,
            policy = "cfsQuota",
            action = decision.action,
            old_quota_us = seen.current_quota_us.unwrap_or(0),
            new_quota_us = quota_us,
            budget_milli = budget.budget_milli,
            capacity_milli = budget.capacity_milli,
            threshold_percent = budget.threshold_percent,
            non_be_milli = usage.non_be_milli,
            non_be_last_milli = usage.non_be_last_milli,
            system_milli = budget.system_milli,
            be_milli = usage.be_milli,
            node_milli = usage.node_milli,
            dry_run,
            "cpu suppress: besteffort quota"
        ),
        FastAction::Restore if has_scope => info!(
            strategy = STRATEGY,
            dry_run,
            "cpu suppress off: besteffort quota back to unlimited, BE cpusets back to the full BE set"
        ),
        FastAction::Restore => info!(
            strategy = STRATEGY,
            dry_run, "cpu suppress off: besteffort quota back to unlimited"
        ),
        FastAction::ResizeCpuset {
            wanted_cpus,
            budget,
            usage,
        } => {
            if let Some(size) = seen.cpus {
                info!(
                    strategy = STRATEGY,
                    policy = "cpuset",
                    old_cpus = size.current,
                    wanted_cpus,
                    available_cpus = size.available,
                    budget_milli = budget.budget_milli,
                    capacity_milli = budget.capacity_milli,
                    threshold_percent = budget.threshold_percent,
                    non_be_milli = usage.non_be_milli,
                    non_be_last_milli = usage.non_be_last_milli,
                    system_milli = budget.system_milli,
                    be_milli = usage.be_milli,
                    node_milli = usage.node_milli,
                    dry_run,
                    "cpu suppress: BE cpuset"
                );
            }
        }
        FastAction::Idle => {}
    }
}
