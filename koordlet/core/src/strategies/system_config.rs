//! Node sysctls of the NodeSLO's `systemStrategy` (gate SystemConfig), with upstream's formulas,
//! and the node's own values put back when the strategy (or a field, or the gate) goes away.
//!
//! - `minFreeKbytesFactor` f: `vm.min_free_kbytes = (memory capacity / 1024) × f / 10000`, only
//!   when the result is within 10240..=10485760 KiB (10 MiB .. 10 GiB);
//! - `watermarkScaleFactor` → `vm.watermark_scale_factor`, only within 10..=400;
//! - `memcgReapBackGround` 0|1 → `/sys/kernel/mm/memcg_reaper/reap_background` (Anolis);
//! - `schedGroupIdentityEnabled` 0|1 → `kernel.sched_group_identity_enabled` (Anolis);
//! - `schedIdleSaverWmark` → `kernel.sched_idle_saver_wmark` (Anolis), ≥ 0;
//! - `pageCacheLimitEnabled` 0|1 → `vm.pagecache_limit_enabled` (Anolis).
//!
//! A knob whose file this kernel lacks is reported as skipped. The first time a knob is
//! written, the value the node had is remembered (the agent keeps it in a node-local state
//! file, so a restart does not lose it); when the strategy no longer asks for the knob, the
//! remembered value is written back and forgotten. `schedFeatures` is not applied (the
//! debugfs file is not a sysctl with a value to restore) and the plan says so.

use std::collections::BTreeMap;

use koord_api::nodeslo::SystemStrategy;
use serde::Serialize;

/// Strategy name in plans and audit lines.
pub const STRATEGY: &str = "system_config";
/// The gate it runs under (upstream's).
pub const GATE: &str = "SystemConfig";
/// Smallest `min_free_kbytes` written (10 MiB).
pub const MIN_FREE_KBYTES_FLOOR: i64 = 10 * 1024;
/// Largest `min_free_kbytes` written (10 GiB).
pub const MIN_FREE_KBYTES_CEILING: i64 = 10 * 1024 * 1024;

/// A node-level knob, with where its file lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum SystemKnob {
    /// `vm.min_free_kbytes`.
    #[serde(rename = "vm.min_free_kbytes")]
    MinFreeKbytes,
    /// `vm.watermark_scale_factor`.
    #[serde(rename = "vm.watermark_scale_factor")]
    WatermarkScaleFactor,
    /// `/sys/kernel/mm/memcg_reaper/reap_background`.
    #[serde(rename = "memcg_reaper.reap_background")]
    MemcgReapBackground,
    /// `kernel.sched_group_identity_enabled`.
    #[serde(rename = "kernel.sched_group_identity_enabled")]
    SchedGroupIdentityEnabled,
    /// `kernel.sched_idle_saver_wmark`.
    #[serde(rename = "kernel.sched_idle_saver_wmark")]
    SchedIdleSaverWmark,
    /// `vm.pagecache_limit_enabled`.
    #[serde(rename = "vm.pagecache_limit_enabled")]
    PageCacheLimitEnabled,
}

/// Which root a knob's file is below.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KnobRoot {
    /// `/proc/sys`.
    ProcSys,
    /// `/sys`.
    Sys,
}

impl SystemKnob {
    /// Every knob, in the order writes are made.
    pub const ALL: [SystemKnob; 6] = [
        SystemKnob::MinFreeKbytes,
        SystemKnob::WatermarkScaleFactor,
        SystemKnob::MemcgReapBackground,
        SystemKnob::SchedGroupIdentityEnabled,
        SystemKnob::SchedIdleSaverWmark,
        SystemKnob::PageCacheLimitEnabled,
    ];

    /// The name plans, audit lines and the state file use.
    pub fn name(self) -> &'static str {
        match self {
            SystemKnob::MinFreeKbytes => "vm.min_free_kbytes",
            SystemKnob::WatermarkScaleFactor => "vm.watermark_scale_factor",
            SystemKnob::MemcgReapBackground => "memcg_reaper.reap_background",
            SystemKnob::SchedGroupIdentityEnabled => "kernel.sched_group_identity_enabled",
            SystemKnob::SchedIdleSaverWmark => "kernel.sched_idle_saver_wmark",
            SystemKnob::PageCacheLimitEnabled => "vm.pagecache_limit_enabled",
        }
    }

    /// Looks a knob up by [`SystemKnob::name`].
    pub fn from_name(name: &str) -> Option<SystemKnob> {
        SystemKnob::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The root and the file's path below it.
    pub fn file(self) -> (KnobRoot, &'static str) {
        match self {
            SystemKnob::MinFreeKbytes => (KnobRoot::ProcSys, "vm/min_free_kbytes"),
            SystemKnob::WatermarkScaleFactor => (KnobRoot::ProcSys, "vm/watermark_scale_factor"),
            SystemKnob::MemcgReapBackground => (KnobRoot::Sys, "kernel/mm/memcg_reaper/reap_background"),
            SystemKnob::SchedGroupIdentityEnabled => {
                (KnobRoot::ProcSys, "kernel/sched_group_identity_enabled")
            }
            SystemKnob::SchedIdleSaverWmark => (KnobRoot::ProcSys, "kernel/sched_idle_saver_wmark"),
            SystemKnob::PageCacheLimitEnabled => (KnobRoot::ProcSys, "vm/pagecache_limit_enabled"),
        }
    }
}

/// One knob write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SystemWrite {
    /// The knob.
    pub knob: SystemKnob,
    /// The value to write.
    pub value: i64,
    /// The value the file holds now.
    pub current: i64,
    /// A restore of the node's own value (the knob is forgotten after it).
    pub restore: bool,
}

/// A knob the strategy asks for but that is not written, with why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkippedKnob {
    /// The field or knob.
    pub knob: String,
    /// Why.
    pub reason: String,
}

/// What system_config decided (`strategies.system_config` of `koordlet plan`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SystemConfigPlan {
    /// Writes, restores included, in order. Unchanged values are left out.
    pub writes: Vec<SystemWrite>,
    /// Values the node had before the first write of a knob: to remember before writing.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub remember: BTreeMap<SystemKnob, i64>,
    /// Knobs not written, with the reason.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<SkippedKnob>,
}

/// Everything system_config looks at.
#[derive(Debug, Clone)]
pub struct SystemConfigInput<'a> {
    /// `systemStrategy` of the NodeSLO; `None` when there is none or the gate is off (every
    /// remembered knob is restored).
    pub strategy: Option<&'a SystemStrategy>,
    /// Node memory capacity, bytes.
    pub memory_capacity_bytes: u64,
    /// What each knob's file holds now; absent: the kernel has no such file.
    pub current: &'a BTreeMap<SystemKnob, i64>,
    /// The node's own values of knobs written before.
    pub originals: &'a BTreeMap<SystemKnob, i64>,
}

/// The value the strategy asks for, `Ok(None)` when it asks for nothing, `Err` when the field's
/// value is outside what may be written.
fn desired(knob: SystemKnob, s: &SystemStrategy, memory_capacity_bytes: u64) -> Result<Option<i64>, String> {
    let flag = |v: Option<i64>, field: &str| match v {
        None => Ok(None),
        Some(v @ (0 | 1)) => Ok(Some(v)),
        Some(v) => Err(format!("{field} {v} is not 0 or 1")),
    };
    match knob {
        SystemKnob::MinFreeKbytes => match s.min_free_kbytes_factor {
            None => Ok(None),
            Some(f) if f <= 0 => Err(format!("minFreeKbytesFactor {f} must be > 0")),
            Some(f) => {
                let kb = i128::from(memory_capacity_bytes / 1024) * i128::from(f) / 10_000;
                if (i128::from(MIN_FREE_KBYTES_FLOOR)..=i128::from(MIN_FREE_KBYTES_CEILING)).contains(&kb) {
                    Ok(Some(kb as i64))
                } else {
                    Err(format!(
                        "min_free_kbytes {kb} from minFreeKbytesFactor {f} is outside \
                         [{MIN_FREE_KBYTES_FLOOR}, {MIN_FREE_KBYTES_CEILING}]"
                    ))
                }
            }
        },
        SystemKnob::WatermarkScaleFactor => match s.watermark_scale_factor {
            None => Ok(None),
            Some(v) if (10..=400).contains(&v) => Ok(Some(v)),
            Some(v) => Err(format!("watermarkScaleFactor {v} is outside [10, 400]")),
        },
        SystemKnob::MemcgReapBackground => flag(s.memcg_reap_back_ground, "memcgReapBackGround"),
        SystemKnob::SchedGroupIdentityEnabled => {
            flag(s.sched_group_identity_enabled, "schedGroupIdentityEnabled")
        }
        SystemKnob::SchedIdleSaverWmark => match s.sched_idle_saver_wmark {
            None => Ok(None),
            Some(v) if v >= 0 => Ok(Some(v)),
            Some(v) => Err(format!("schedIdleSaverWmark {v} must be >= 0")),
        },
        SystemKnob::PageCacheLimitEnabled => flag(s.page_cache_limit_enabled, "pageCacheLimitEnabled"),
    }
}

/// Decides the knob writes and restores of one round.
pub fn decide(input: &SystemConfigInput<'_>) -> SystemConfigPlan {
    let mut plan = SystemConfigPlan::default();
    if let Some(features) = input.strategy.and_then(|s| s.sched_features.as_ref())
        && !features.is_empty()
    {
        plan.skipped.push(SkippedKnob {
            knob: "schedFeatures".into(),
            reason: "not applied: debugfs sched_features has no value to restore".into(),
        });
    }
    for knob in SystemKnob::ALL {
        let want = match input
            .strategy
            .map(|s| desired(knob, s, input.memory_capacity_bytes))
        {
            None | Some(Ok(None)) => None,
            Some(Ok(Some(v))) => Some(v),
            Some(Err(reason)) => {
                plan.skipped.push(SkippedKnob {
                    knob: knob.name().into(),
                    reason,
                });
                None
            }
        };
        let current = input.current.get(&knob).copied();
        let original = input.originals.get(&knob).copied();
        match (want, current) {
            (Some(_), None) => plan.skipped.push(SkippedKnob {
                knob: knob.name().into(),
                reason: "this kernel has no such file".into(),
            }),
            (Some(value), Some(current)) => {
                if original.is_none() {
                    plan.remember.insert(knob, current);
                }
                if value != current {
                    plan.writes.push(SystemWrite {
                        knob,
                        value,
                        current,
                        restore: false,
                    });
                }
            }
            (None, current) => {
                if let Some(value) = original {
                    // Written (and forgotten) even when equal, so the remembered value goes.
                    plan.writes.push(SystemWrite {
                        knob,
                        value,
                        current: current.unwrap_or(value),
                        restore: true,
                    });
                }
            }
        }
    }
    plan
}

#[cfg(test)]
#[path = "system_config_tests.rs"]
mod tests;
