//! The act step the QoS round and the fast suppress loop share: a plan's writes go to the
//! executor in plan order, one executor call per run of writes from the same strategy (the
//! executor orders the writes inside a call safely), and each run's outcome is counted in
//! `cgroup_writes_total{strategy,result}`.

use std::time::Instant;

use koordlet_core::CgroupWrite;

use crate::executor::{ApplyReport, Executor};
use crate::telemetry::Telemetry;

/// Applies one strategy's run of writes (borrowed) and records the outcome.
pub fn apply_run<'a>(
    executor: &mut Executor,
    telemetry: Option<&Telemetry>,
    strategy: &str,
    writes: impl IntoIterator<Item = &'a CgroupWrite>,
    now: Instant,
) -> ApplyReport {
    let report = executor.apply_refs(writes, now);
    if let Some(t) = telemetry {
        t.record_apply(strategy, &report);
    }
    report
}

/// Applies a plan's writes in plan order, one [`apply_run`] per run of writes from the same
/// strategy. Returns each run's strategy and report.
pub fn apply_in_plan_order<'a>(
    executor: &mut Executor,
    telemetry: Option<&Telemetry>,
    writes: &'a [CgroupWrite],
    now: Instant,
) -> Vec<(&'a str, ApplyReport)> {
    let mut reports = Vec::new();
    let mut start = 0;
    while start < writes.len() {
        let strategy = &writes[start].strategy;
        let end = writes[start..]
            .iter()
            .position(|w| w.strategy != *strategy)
            .map_or(writes.len(), |n| start + n);
        let report = apply_run(executor, telemetry, strategy, &writes[start..end], now);
        reports.push((strategy.as_ref(), report));
        start = end;
    }
    reports
}
