//! resctrl: last-level cache ways and memory bandwidth per QoS class (gate `RdtResctrl`).
//!
//! Three groups live under the resctrl root: `LSR` (LSR and LSE pods), `LS` and `BE`. Each is
//! configured from the NodeSLO's `resourceQOSStrategy.<class>.resctrlQOS`, field by field over
//! upstream's recommended defaults (LSR/LS: cache 0-100 %, bandwidth 100 %; BE: cache 0-30 %,
//! bandwidth 100 %). A class whose `enable` is not `true` gets the whole cache and full
//! bandwidth, and its pods' tasks are not moved (upstream's "none" resctrl QoS).
//!
//! Cache: the ways of `info/L3/cbm_mask` (contiguous low bits), `start = ceil(ways × start%)`,
//! `end = ceil(ways × end%)`, widened to `min_cbm_bits` ways when the rounding leaves fewer.
//! Bandwidth: Intel in percent, raised to `min_bandwidth` and rounded up to `bandwidth_gran`
//! as the kernel does; AMD in 1/8 GB/s, 100 % being the unlimited value the root group shows
//! and less being that share of 20 GB/s (upstream's figure for one CCD); in the software
//! controller's MiB/s mode (`mba_MBps`) bandwidth is left alone. One line per resource the root
//! `schemata` lists (`L3`, or `L3CODE` + `L3DATA` with CDP, and `MB`), covering every domain id
//! it lists.

use std::collections::BTreeSet;

use koord_api::nodeslo::{ResctrlQosCfg, ResourceQos};
use koord_api::{NodeSLOSpec, QoSClass};
use serde::Serialize;

use crate::pod::PodMeta;
use crate::resctrl::{CacheInfo, CpuVendor, MbInfo, ResctrlFacts, ResctrlGroup, ResctrlWrite, SchemataLine};

/// The strategy name on writes and audit lines.
pub const STRATEGY: &str = "resctrl";

/// AMD's bandwidth for 100 % below "unlimited", in 1/8 GB/s: 20 GB/s per CCD (upstream's
/// `AMDCCDMaxMBGbps` 25 GB/s × 0.8).
pub const AMD_CCD_MAX_MB: u64 = 160;

/// The root `MB` value of the software controller (`mba_MBps` mount option: MiB/s, unlimited).
pub const MBA_SC_UNLIMITED: u64 = u32::MAX as u64;

/// Why a cache mask cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MaskError {
    /// `cbm_mask` is zero or its ways are not contiguous low bits.
    #[error("cbm_mask {0:#x} is not a contiguous run of low bits")]
    NonContiguous(u64),
    /// The range is empty or outside 0-100.
    #[error("cat range {start}-{end}%: need 0 <= start < end <= 100")]
    Range {
        /// catRangeStartPercent.
        start: i64,
        /// catRangeEndPercent.
        end: i64,
    },
    /// The cache has fewer ways than `min_cbm_bits`.
    #[error("{ways} cache ways, fewer than min_cbm_bits {min}")]
    TooFewWays {
        /// Ways of the cache.
        ways: u32,
        /// min_cbm_bits.
        min: u32,
    },
}

/// The capacity bitmask for `start%..end%` of the ways of `info.cbm_mask`.
pub fn cat_mask(info: CacheInfo, start: i64, end: i64) -> Result<u64, MaskError> {
    let cbm = info.cbm_mask;
    if cbm == 0 || cbm & cbm.wrapping_add(1) != 0 {
        return Err(MaskError::NonContiguous(cbm));
    }
    if !(0 <= start && start < end && end <= 100) {
        return Err(MaskError::Range { start, end });
    }
    let ways = cbm.count_ones();
    let min = info.min_cbm_bits.max(1);
    if ways < min {
        return Err(MaskError::TooFewWays { ways, min });
    }
    // Bounds checked above: 0 <= start < end <= 100 and ways <= 64.
    let way = |percent: i64| (u64::from(ways) * percent as u64).div_ceil(100) as u32;
    let (mut lo, mut hi) = (way(start), way(end));
    if hi - lo < min {
        hi = (lo + min).min(ways);
        lo = hi - min;
    }
    Ok(low_bits(hi) & !low_bits(lo))
}

fn low_bits(n: u32) -> u64 {
    if n >= 64 { u64::MAX } else { (1u64 << n) - 1 }
}

/// How the node's `MB` values are expressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "unit")]
pub enum MbUnit {
    /// Intel: percent, at least `min`, in steps of `gran`.
    Percent {
        /// min_bandwidth.
        min: u64,
        /// bandwidth_gran.
        gran: u64,
    },
    /// AMD: 1/8 GB/s, `max` meaning unlimited.
    EighthGbps {
        /// The unlimited value (the root group's).
        max: u64,
    },
    /// The software controller's MiB/s: not managed.
    Mibps,
}

impl MbUnit {
    /// The unit of a node: the software controller when the root shows its unlimited value,
    /// AMD by vendor (or, vendor unknown, when the root shows more than 100), else Intel.
    pub fn of(facts: &ResctrlFacts, info: MbInfo) -> Self {
        let root_max = facts
            .root
            .line("MB")
            .and_then(|l| l.values.values().copied().max())
            .unwrap_or(100);
        if root_max >= MBA_SC_UNLIMITED {
            MbUnit::Mibps
        } else if facts.vendor == CpuVendor::Amd || (facts.vendor == CpuVendor::Unknown && root_max > 100) {
            MbUnit::EighthGbps { max: root_max }
        } else {
            MbUnit::Percent {
                min: info.min_bandwidth,
                gran: info.bandwidth_gran.max(1),
            }
        }
    }

    /// The `MB` value for `percent` (clamped to 0-100); `None` for [`MbUnit::Mibps`].
    pub fn value(self, percent: i64) -> Option<u64> {
        let p = percent.clamp(0, 100) as u64;
        match self {
            MbUnit::Percent { min, gran } => Some(p.max(min).div_ceil(gran).saturating_mul(gran).min(100)),
            MbUnit::EighthGbps { max } if p >= 100 => Some(max),
            MbUnit::EighthGbps { max } => Some((AMD_CCD_MAX_MB * p / 100).clamp(1, max.max(1))),
            MbUnit::Mibps => None,
        }
    }
}

/// A class's resctrl settings after defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClassResctrl {
    /// `resctrlQOS.enable`: tasks are moved only when on; off means the whole cache and bandwidth.
    pub enable: bool,
    /// catRangeStartPercent.
    pub cat_range_start_percent: i64,
    /// catRangeEndPercent.
    pub cat_range_end_percent: i64,
    /// mbaPercent.
    pub mba_percent: i64,
}

impl ClassResctrl {
    /// The class config over upstream's recommended defaults (BE: cache 0-30 %).
    pub fn resolve(group: ResctrlGroup, cfg: Option<&ResctrlQosCfg>) -> Self {
        let enable = cfg.and_then(|c| c.enable) == Some(true);
        if !enable {
            return ClassResctrl {
                enable,
                cat_range_start_percent: 0,
                cat_range_end_percent: 100,
                mba_percent: 100,
            };
        }
        let default_end = if group == ResctrlGroup::Be { 30 } else { 100 };
        ClassResctrl {
            enable,
            cat_range_start_percent: cfg.and_then(|c| c.cat_range_start_percent).unwrap_or(0),
            cat_range_end_percent: cfg.and_then(|c| c.cat_range_end_percent).unwrap_or(default_end),
            mba_percent: cfg.and_then(|c| c.mba_percent).unwrap_or(100),
        }
    }
}

/// One group's decision, as `strategies.resctrl.groups[]` prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupPlan {
    /// The group.
    pub group: ResctrlGroup,
    /// Its settings.
    pub config: ClassResctrl,
    /// The cache mask (hex), when the node has cache allocation and the range is valid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub l3_mask: Option<String>,
    /// The `MB` value, when the node has bandwidth allocation in a managed unit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mb: Option<u64>,
    /// Why part of the group's schemata is not written.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

/// A pod whose tasks belong in a group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PodGroup {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
    /// The group.
    pub group: ResctrlGroup,
}

/// The decision of one round (`strategies.resctrl` of `koordlet plan`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResctrlPlan {
    /// CPU vendor the bandwidth unit follows.
    pub vendor: CpuVendor,
    /// The bandwidth unit, when the node has bandwidth allocation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mb_unit: Option<MbUnit>,
    /// Code/data prioritization is on (`L3CODE` and `L3DATA` written).
    pub cdp: bool,
    /// Each group.
    pub groups: Vec<GroupPlan>,
    /// Pods whose tasks are moved, with their group.
    pub pods: Vec<PodGroup>,
    /// Schemata lines to write, group by group.
    #[serde(skip)]
    pub writes: Vec<ResctrlWrite>,
}

/// The group of a QoS class (LSE joins LSR; SYSTEM and unknown pods stay where they are).
pub fn group_of(qos: QoSClass) -> Option<ResctrlGroup> {
    match qos {
        QoSClass::Lse | QoSClass::Lsr => Some(ResctrlGroup::Lsr),
        QoSClass::Ls => Some(ResctrlGroup::Ls),
        QoSClass::Be => Some(ResctrlGroup::Be),
        _ => None,
    }
}

/// Which classes have resctrl enabled in a NodeSLO (`resourceQOSStrategy.<class>.resctrlQOS.enable`).
///
/// [`ResctrlClasses::pod_group`] is the one rule for where a pod's tasks go: the round moves
/// them there ([`decide`]) and koordlet's runtime hook names the same group as the container's
/// RDT class at creation, so neither ever moves a task the other placed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResctrlClasses {
    /// LSR (and LSE) pods' group is enabled.
    pub lsr: bool,
    /// LS pods' group is enabled.
    pub ls: bool,
    /// BE pods' group is enabled.
    pub be: bool,
}

impl ResctrlClasses {
    /// The enabled classes of `slo` (none without a `resctrlQOS` that says `enable: true`).
    pub fn from_slo(slo: &NodeSLOSpec) -> Self {
        let enabled = |group| ClassResctrl::resolve(group, class_cfg(slo, group)).enable;
        ResctrlClasses {
            lsr: enabled(ResctrlGroup::Lsr),
            ls: enabled(ResctrlGroup::Ls),
            be: enabled(ResctrlGroup::Be),
        }
    }

    /// Whether `group`'s class has resctrl enabled.
    pub fn enabled(self, group: ResctrlGroup) -> bool {
        match group {
            ResctrlGroup::Lsr => self.lsr,
            ResctrlGroup::Ls => self.ls,
            ResctrlGroup::Be => self.be,
        }
    }

    /// The group a pod of `qos` belongs in: its class's group ([`group_of`]) when that class
    /// has resctrl enabled; `None` leaves the pod's tasks where they are.
    pub fn pod_group(self, qos: QoSClass) -> Option<ResctrlGroup> {
        group_of(qos).filter(|g| self.enabled(*g))
    }
}

fn class_cfg(slo: &NodeSLOSpec, group: ResctrlGroup) -> Option<&ResctrlQosCfg> {
    let s = slo.resource_qos_strategy.as_ref()?;
    let class: Option<&ResourceQos> = match group {
        ResctrlGroup::Lsr => s.lsr_class.as_ref(),
        ResctrlGroup::Ls => s.ls_class.as_ref(),
        ResctrlGroup::Be => s.be_class.as_ref(),
    };
    class?.resctrl_qos.as_ref()
}

/// Decides every group's schemata and which pods' tasks go where. Errors are per group and
/// per resource: a bad range for BE leaves LS and LSR (and BE's bandwidth) written.
pub fn decide(slo: &NodeSLOSpec, facts: &ResctrlFacts, pods: &[PodMeta]) -> ResctrlPlan {
    let cdp = facts.root.line("L3CODE").is_some() && facts.root.line("L3DATA").is_some();
    let cache_lines: Vec<&SchemataLine> = if cdp {
        ["L3CODE", "L3DATA"]
            .iter()
            .filter_map(|r| facts.root.line(r))
            .collect()
    } else {
        facts.root.line("L3").into_iter().collect()
    };
    let mb_line = facts.root.line("MB");
    let mb_unit = facts
        .mb
        .filter(|_| mb_line.is_some())
        .map(|i| MbUnit::of(facts, i));
    let mut plan = ResctrlPlan {
        vendor: facts.vendor,
        mb_unit,
        cdp,
        groups: Vec::new(),
        pods: Vec::new(),
        writes: Vec::new(),
    };
    for group in ResctrlGroup::ALL {
        let config = ClassResctrl::resolve(group, class_cfg(slo, group));
        let mut g = GroupPlan {
            group,
            config,
            l3_mask: None,
            mb: None,
            errors: Vec::new(),
        };
        if !cache_lines.is_empty() {
            match facts
                .l3
                .ok_or_else(|| "no info/L3/cbm_mask".to_string())
                .and_then(|info| {
                    cat_mask(info, config.cat_range_start_percent, config.cat_range_end_percent)
                        .map_err(|e| e.to_string())
                }) {
                Ok(mask) => {
                    g.l3_mask = Some(format!("{mask:x}"));
                    for root in &cache_lines {
                        plan.writes.push(ResctrlWrite {
                            group,
                            line: SchemataLine::uniform(&root.resource, root.values.keys().copied(), mask),
                            strategy: STRATEGY,
                        });
                    }
                }
                Err(e) => g.errors.push(format!("L3: {e}")),
            }
        }
        if let Some(root) = mb_line {
            match mb_unit.map(|u| u.value(config.mba_percent)) {
                Some(Some(value)) => {
                    g.mb = Some(value);
                    plan.writes.push(ResctrlWrite {
                        group,
                        line: SchemataLine::uniform("MB", root.values.keys().copied(), value),
                        strategy: STRATEGY,
                    });
                }
                Some(None) => g
                    .errors
                    .push("MB: the software controller (mba_MBps) is not managed".into()),
                None => g.errors.push("MB: no info/MB".into()),
            }
        }
        plan.groups.push(g);
    }
    let classes = ResctrlClasses::from_slo(slo);
    plan.pods = pods
        .iter()
        .filter(|p| p.is_running())
        .filter_map(|p| {
            let group = classes.pod_group(p.qos)?;
            Some(PodGroup {
                namespace: p.namespace.clone(),
                name: p.name.clone(),
                uid: p.uid.as_str().to_owned(),
                group,
            })
        })
        .collect();
    plan
}

/// The task ids of `candidates` not yet in the group, in order, each once (tids the kernel
/// still lists elsewhere are written one per write, as upstream).
pub fn tasks_to_move(in_group: &BTreeSet<u32>, candidates: impl IntoIterator<Item = u32>) -> Vec<u32> {
    let mut seen = BTreeSet::new();
    candidates
        .into_iter()
        .filter(|t| !in_group.contains(t) && seen.insert(*t))
        .collect()
}

#[cfg(test)]
#[path = "resctrl_tests.rs"]
mod tests;
