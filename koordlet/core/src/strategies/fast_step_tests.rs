#![allow(clippy::unwrap_used)]

use koord_api::nodeslo::{CpuSuppressPolicy, ResourceThresholdStrategy};

use super::*;
use crate::strategies::cpu_suppress;
use crate::strategies::fast_suppress::{FastSuppress, FastSuppressConfig, FastUsage, NodeCpu};
use crate::{CgroupDir, CpuSet};

fn set_quota(quota_us: i64) -> FastAction {
    let strategy = ResourceThresholdStrategy {
        enable: Some(true),
        cpu_suppress_policy: Some(CpuSuppressPolicy::CfsQuota),
        ..Default::default()
    };
    let node = NodeCpu {
        capacity_milli: 2000,
        reserved_milli: 0,
    };
    let budget = FastSuppress::new(FastSuppressConfig::default()).budget(&strategy, node);
    FastAction::SetQuota {
        decision: cpu_suppress::quota_decision(&budget, None),
        quota_us,
        budget,
        usage: FastUsage::default(),
    }
}

fn resize(wanted_cpus: usize) -> FastAction {
    let FastAction::SetQuota { budget, usage, .. } = set_quota(0) else {
        unreachable!()
    };
    FastAction::ResizeCpuset {
        wanted_cpus,
        budget,
        usage,
    }
}

fn size(current: usize, available: usize) -> Option<CpusetSize> {
    Some(CpusetSize {
        current,
        available,
        min: 1,
    })
}

fn quota(quota_us: i64, direction: Direction) -> Option<FastWrite> {
    Some(FastWrite::Quota { quota_us, direction })
}

fn plan(
    with_strategy: bool,
    direction: Direction,
    settles: SuppressMode,
    report: PlanReport,
) -> Option<FastWrite> {
    Some(FastWrite::Plan(PlanWrite {
        with_strategy,
        cpusets_only: false,
        direction,
        settles,
        report,
    }))
}

/// Name, action, besteffort quota now, cpuset size, BE tree known, the write wanted.
type Case = (
    &'static str,
    FastAction,
    Option<i64>,
    Option<CpusetSize>,
    bool,
    Option<FastWrite>,
);

#[test]
fn each_action_becomes_its_write() {
    use Direction::{Decrease, Increase, Restore};
    #[rustfmt::skip]
    let cases: [Case; 13] = [
        ("idle", FastAction::Idle, Some(50_000), None, true, None),
        ("quota up", set_quota(60_000), Some(50_000), None, false, quota(60_000, Increase)),
        ("quota down", set_quota(40_000), Some(50_000), None, false, quota(40_000, Decrease)),
        ("quota from unlimited", set_quota(40_000), Some(-1), None, false, quota(40_000, Decrease)),
        ("quota unknown", set_quota(40_000), None, None, false, quota(40_000, Decrease)),
        ("restore without BE tree", FastAction::Restore, Some(40_000), None, false, quota(-1, Restore)),
        ("restore with BE tree", FastAction::Restore, Some(40_000), None, true,
            plan(false, Restore, SuppressMode::Off, PlanReport::QuotaRestored)),
        ("cpuset grows", resize(3), Some(-1), size(2, 4), true,
            plan(true, Increase, SuppressMode::Cpuset, PlanReport::Cpuset)),
        ("cpuset shrinks", resize(1), Some(-1), size(2, 4), true,
            plan(true, Decrease, SuppressMode::Cpuset, PlanReport::Cpuset)),
        // Asking for more than BE may have is no increase once it has all of it.
        ("cpuset capped", resize(8), Some(-1), size(4, 4), true,
            plan(true, Decrease, SuppressMode::Cpuset, PlanReport::Cpuset)),
        ("cpuset capped but short", resize(8), Some(-1), size(3, 4), true,
            plan(true, Increase, SuppressMode::Cpuset, PlanReport::Cpuset)),
        ("cpuset size unread", resize(3), Some(-1), None, true, None),
        ("idle without scope", FastAction::Idle, None, size(2, 4), false, None),
    ];
    for (name, action, current, cpus, has_scope, want) in cases {
        assert_eq!(fast_write(&action, current, cpus, has_scope), want, "{name}");
    }
}

#[test]
fn settling_plans_restore_or_apply_and_report_as_the_loop_did() {
    use Direction::{Decrease, Restore};
    let cases = [
        (
            SettleStep::RestoreAll,
            false,
            false,
            Restore,
            SuppressMode::Off,
            PlanReport::Cpuset,
        ),
        (
            SettleStep::RestoreCpusets,
            true,
            true,
            Restore,
            SuppressMode::Quota,
            PlanReport::Silent,
        ),
        (
            SettleStep::ApplyCpuset,
            true,
            false,
            Decrease,
            SuppressMode::Cpuset,
            PlanReport::Cpuset,
        ),
    ];
    for (step, with_strategy, cpusets_only, direction, settles, report) in cases {
        assert_eq!(
            step.write(),
            PlanWrite {
                with_strategy,
                cpusets_only,
                direction,
                settles,
                report,
            },
            "{step:?}"
        );
    }
}

#[test]
fn a_cpusets_only_plan_leaves_the_quota_alone() {
    let dir = CgroupDir::new("kubepods/besteffort").unwrap();
    let quota = CgroupWrite::int(&dir, CgroupResource::CpuCfsQuota, -1, "cpu_suppress");
    let cpus = CgroupWrite::cpus(
        &dir,
        CgroupResource::CpusetCpus,
        &CpuSet::from_cpus([0, 1]),
        "cpu_suppress",
    );
    let only = SettleStep::RestoreCpusets.write();
    assert!(!only.keeps(&quota) && only.keeps(&cpus));
    let all = SettleStep::RestoreAll.write();
    assert!(all.keeps(&quota) && all.keeps(&cpus));
    assert_eq!(
        [Direction::Increase, Direction::Decrease, Direction::Restore].map(Direction::as_str),
        ["increase", "decrease", "restore"]
    );
}
