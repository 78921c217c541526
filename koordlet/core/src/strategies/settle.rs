//! The fast suppress loop's second state machine: settling the resource the policy in force
//! does not drive.
//!
//! The fast path drives one resource per tick (the besteffort quota under `cfsQuota`, the BE
//! cpusets under `cpuset`). When the policy changes, the other resource must be put back once:
//! under `cfsQuota` every BE dir gets the full BE set again, under `cpuset` the quota goes back
//! to unlimited and every BE dir gets the chosen set, and with suppress off both are restored.
//! [`Settle`] remembers which policy's settling went through and says, after each tick, which
//! full suppress plan (if any) the loop must apply.

use koord_api::nodeslo::{CpuSuppressPolicy, ResourceThresholdStrategy};

use crate::write::CgroupWrite;

/// Which suppress policy is in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SuppressMode {
    /// Suppress off (no strategy, or `enable` not true).
    Off,
    /// Policy `cfsQuota`.
    Quota,
    /// Policy `cpuset` (upstream's default).
    Cpuset,
}

impl SuppressMode {
    /// The mode of the NodeSLO's `resourceUsedThresholdWithBE` (`None`: no strategy).
    pub fn of(strategy: Option<&ResourceThresholdStrategy>) -> Self {
        match strategy.filter(|s| s.enable == Some(true)) {
            None => SuppressMode::Off,
            Some(s) => match s.cpu_suppress_policy.unwrap_or(CpuSuppressPolicy::Cpuset) {
                CpuSuppressPolicy::CfsQuota => SuppressMode::Quota,
                CpuSuppressPolicy::Cpuset => SuppressMode::Cpuset,
            },
        }
    }
}

/// A full suppress plan the loop applies to settle a mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettleStep {
    /// Suppress off: the plan without a strategy (quota unlimited, full BE cpusets).
    RestoreAll,
    /// `cfsQuota`: the plan's cpuset restore only; the quota stays the fast path's.
    RestoreCpusets,
    /// `cpuset`: the whole plan (chosen set on every BE dir, quota unlimited).
    ApplyCpuset,
}

impl SettleStep {
    /// Whether the plan is decided with the NodeSLO's strategy (`false`: as if suppress were off).
    pub fn with_strategy(self) -> bool {
        self != SettleStep::RestoreAll
    }

    /// Whether the step applies this write of the plan.
    pub fn keeps(self, write: &CgroupWrite) -> bool {
        self.write().keeps(write)
    }

    /// The mode this step settles.
    pub fn mode(self) -> SuppressMode {
        match self {
            SettleStep::RestoreAll => SuppressMode::Off,
            SettleStep::RestoreCpusets => SuppressMode::Quota,
            SettleStep::ApplyCpuset => SuppressMode::Cpuset,
        }
    }
}

/// Which mode has been settled.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settle {
    settled: Option<SuppressMode>,
}

impl Settle {
    /// The step to apply after a tick in `mode`. Nothing when the tick's own action wrote
    /// (`acted`), when the mode is settled, or without the BE tree (`has_scope`); under
    /// `cpuset` only once the budget and the besteffort cpuset are known (`cpuset_known`).
    pub fn step(
        &self,
        mode: SuppressMode,
        acted: bool,
        has_scope: bool,
        cpuset_known: bool,
    ) -> Option<SettleStep> {
        if acted || self.settled == Some(mode) || !has_scope {
            return None;
        }
        match mode {
            SuppressMode::Off => Some(SettleStep::RestoreAll),
            SuppressMode::Quota => Some(SettleStep::RestoreCpusets),
            SuppressMode::Cpuset if cpuset_known => Some(SettleStep::ApplyCpuset),
            SuppressMode::Cpuset => None,
        }
    }

    /// Records that a plan settling `mode` went through.
    pub fn settled(&mut self, mode: SuppressMode) {
        self.settled = Some(mode);
    }

    /// The BE tree or the CPU pools changed: under `cpuset` the new dirs need the chosen set.
    pub fn scope_changed(&mut self) {
        if self.settled == Some(SuppressMode::Cpuset) {
            self.settled = None;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::{CgroupDir, CgroupResource};

    #[test]
    fn each_mode_is_settled_once_and_cpuset_again_after_a_scope_change() {
        let mut s = Settle::default();
        assert_eq!(
            s.step(SuppressMode::Off, false, true, false),
            Some(SettleStep::RestoreAll)
        );
        assert_eq!(
            s.step(SuppressMode::Off, false, false, false),
            None,
            "no BE tree yet"
        );
        assert_eq!(
            s.step(SuppressMode::Off, true, true, false),
            None,
            "the tick wrote"
        );
        s.settled(SuppressMode::Off);
        assert_eq!(s.step(SuppressMode::Off, false, true, false), None);
        assert_eq!(
            s.step(SuppressMode::Quota, false, true, false),
            Some(SettleStep::RestoreCpusets)
        );
        assert_eq!(
            s.step(SuppressMode::Cpuset, false, true, false),
            None,
            "budget unknown"
        );
        assert_eq!(
            s.step(SuppressMode::Cpuset, false, true, true),
            Some(SettleStep::ApplyCpuset)
        );
        s.settled(SuppressMode::Cpuset);
        assert_eq!(s.step(SuppressMode::Cpuset, false, true, true), None);
        s.scope_changed();
        assert_eq!(
            s.step(SuppressMode::Cpuset, false, true, true),
            Some(SettleStep::ApplyCpuset)
        );
        s.settled(SuppressMode::Quota);
        s.scope_changed();
        assert_eq!(
            s.step(SuppressMode::Quota, false, true, false),
            None,
            "quota keeps its settling"
        );
    }

    #[test]
    fn restoring_cpusets_leaves_the_quota_to_the_fast_path() {
        let dir = CgroupDir::new("kubepods/besteffort").unwrap();
        let quota = CgroupWrite::int(&dir, CgroupResource::CpuCfsQuota, -1, "cpu_suppress");
        let cpus = CgroupWrite::cpus(
            &dir,
            CgroupResource::CpusetCpus,
            &crate::CpuSet::from_cpus([0, 1]),
            "t",
        );
        assert!(!SettleStep::RestoreCpusets.keeps(&quota));
        assert!(SettleStep::RestoreCpusets.keeps(&cpus));
        assert!(SettleStep::ApplyCpuset.keeps(&quota) && SettleStep::RestoreAll.keeps(&quota));
        assert!(!SettleStep::RestoreAll.with_strategy());
        assert_eq!(SettleStep::RestoreCpusets.mode(), SuppressMode::Quota);
    }

    #[test]
    fn mode_follows_enable_and_policy() {
        assert_eq!(SuppressMode::of(None), SuppressMode::Off);
        let mut s = ResourceThresholdStrategy::default();
        assert_eq!(SuppressMode::of(Some(&s)), SuppressMode::Off);
        s.enable = Some(true);
        assert_eq!(SuppressMode::of(Some(&s)), SuppressMode::Cpuset);
        s.cpu_suppress_policy = Some(CpuSuppressPolicy::CfsQuota);
        assert_eq!(SuppressMode::of(Some(&s)), SuppressMode::Quota);
    }
}
