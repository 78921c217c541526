//! NUMA-level batch resources: the node formula applied to each zone of the node's
//! NodeResourceTopology, for NUMA-aware scheduling of batch pods.
//!
//! ```text
//! per zone z of n zones:
//!   capacity  = z's allocatable (cpu, memory)
//!   margin    = capacity × (100 − reclaimPercent) / 100
//!   reserved, system usage, host applications = ⌈node value / n⌉
//!   a pod placed on k NUMA nodes (resource-status numaNodeResources) counts ⌈its share / k⌉ on
//!     each of them; any other pod, and a reported pod no longer listed, ⌈… / n⌉ on every zone
//!   then the node's policies, floor at 0 and threshold cap (on the zone's capacity)
//! ```
//!
//! Which pods count and what each takes are the node-level rules ([`super::hp_accounts`]), so
//! the zones never disagree with the node on a pod. NUMA usage is not reported, hence the
//! even shares.

use std::collections::BTreeMap;

use jiff::Timestamp;
use koord_api::cpu_normalization::NormalizationRatio;
use serde::Serialize;

use super::{
    Amounts, BatchStrategy, DegradeReason, Explain, FixedTerms, NodeFacts, NumaPlacement, PodFacts,
    PublishedValues, Terms, UpdateDecision, UsageReport, ZoneFacts, apply_policies, fresh_report,
    hp_accounts, terms::host_applications_above_batch, update,
};

/// The batch amounts of one zone with the terms that produced them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ZoneResult {
    /// Zone name.
    pub name: String,
    /// batch-cpu (milli-cores) and batch-memory (bytes), before CPU normalization.
    pub amounts: Amounts,
    /// The formula's terms (`capacity` is the zone's allocatable).
    pub explain: Explain,
}

/// What the NUMA-level calculation decided for one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ZoneOutcome {
    /// The node has no NodeResourceTopology, or none of its zones lists cpu or memory: nothing
    /// is computed and the object is left as it is.
    NoZones,
    /// Colocation is off for the node: the zones are left as they are (as upstream; the
    /// node-level batch resources are removed, so no batch pod fits anyway).
    Disabled,
    /// Usage data cannot be trusted: the zones are left as they are (as upstream).
    Degraded(DegradeReason),
    /// Batch amounts per zone.
    Allocatable {
        /// One per zone, in the object's order.
        zones: Vec<ZoneResult>,
        /// What was read in a way worth saying (unreadable placements, NUMA nodes the object
        /// has no zone for).
        notes: Vec<String>,
    },
}

/// `⌈value / n⌉` per resource (toward +∞, also for a negative value); `n` ≥ 1.
fn share_of(value: Amounts, n: usize) -> Amounts {
    let n = i64::try_from(n.max(1)).unwrap_or(i64::MAX);
    let ceil = |v: i64| {
        let quotient = v / n;
        if v % n > 0 { quotient + 1 } else { quotient }
    };
    Amounts::new(ceil(value.cpu), ceil(value.memory))
}

/// The NUMA id a zone name refers to (`node-3` → 3), as koordlet and node-feature-discovery
/// name NUMA zones.
pub fn numa_id_of_zone(name: &str) -> Option<u32> {
    let digits = name.strip_prefix("node-")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Computes batch amounts for each zone at `now`.
pub fn calculate_zones(
    node: &NodeFacts,
    zones: &[ZoneFacts],
    pods: &[PodFacts],
    report: Option<&UsageReport>,
    strategy: &BatchStrategy,
    now: Timestamp,
) -> ZoneOutcome {
    if zones.is_empty() || !zones.iter().any(|z| z.lists_cpu_or_memory) {
        return ZoneOutcome::NoZones;
    }
    if !strategy.enable {
        return ZoneOutcome::Disabled;
    }
    let (report, system_usage) = match fresh_report(report, strategy.degrade_time_minutes, now) {
        Ok(fresh) => fresh,
        Err(reason) => return ZoneOutcome::Degraded(reason),
    };
    let n = zones.len();
    let reclaim = Amounts::new(strategy.cpu_reclaim_percent, strategy.memory_reclaim_percent);
    let host_applications = host_applications_above_batch(report);
    // System usage is shared out as one sum (host applications included), as upstream.
    let system = share_of(system_usage.plus(host_applications), n);
    let mut terms: Vec<Terms> = zones
        .iter()
        .map(|zone| {
            let fixed = FixedTerms {
                capacity: zone.allocatable,
                kubelet_reserved: share_of(node.kubelet_reserved(), n),
                annotated_reserved: share_of(node.annotated_reservation, n),
                system,
                host_applications: share_of(host_applications, n),
            };
            Terms::fixed(fixed, reclaim)
        })
        .collect();
    // NUMA id → zone index.
    let by_numa_id: BTreeMap<u32, usize> = zones
        .iter()
        .enumerate()
        .filter_map(|(index, zone)| Some((numa_id_of_zone(&zone.name)?, index)))
        .collect();

    let mut notes = Vec::new();
    let accounts = hp_accounts(pods, report);
    for share in &accounts.pods {
        let pod = share.pod;
        let placed: Vec<usize> = match &pod.numa {
            NumaPlacement::Shared => Vec::new(),
            NumaPlacement::Unreadable(reason) => {
                notes.push(format!(
                    "pod {}/{}: {reason}; counted on every zone",
                    pod.namespace, pod.name
                ));
                Vec::new()
            }
            NumaPlacement::Nodes(ids) => {
                let (known, unknown): (Vec<u32>, Vec<u32>) =
                    ids.iter().partition(|id| by_numa_id.contains_key(id));
                if !unknown.is_empty() {
                    let spread = if known.is_empty() {
                        "; counted on every zone"
                    } else {
                        ""
                    };
                    notes.push(format!(
                        "pod {}/{}: NUMA node(s) {unknown:?} have no zone in the NodeResourceTopology{spread}",
                        pod.namespace, pod.name
                    ));
                }
                known
                    .iter()
                    .filter_map(|id| by_numa_id.get(id).copied())
                    .collect()
            }
        };
        let (targets, k): (Box<dyn Iterator<Item = usize>>, usize) = if placed.is_empty() {
            (Box::new(0..n), n)
        } else {
            let k = placed.len();
            (Box::new(placed.into_iter()), k)
        };
        let requested = share_of(share.requested, k);
        let used = share_of(share.used, k);
        let max_used_requested = share_of(share.max_used_requested, k);
        for index in targets {
            if let Some(zone_terms) = terms.get_mut(index) {
                zone_terms.add_pod(requested, used, max_used_requested);
            }
        }
    }
    for usage in &accounts.dangling {
        let part = share_of(*usage, n);
        for zone_terms in &mut terms {
            zone_terms.add_dangling(part);
        }
    }
    let zones = zones
        .iter()
        .zip(&terms)
        .map(|(zone, zone_terms)| {
            let (amounts, explain) = apply_policies(zone_terms, strategy);
            ZoneResult {
                name: zone.name.clone(),
                amounts,
                explain,
            }
        })
        .collect();
    ZoneOutcome::Allocatable { zones, notes }
}

/// What each zone should carry: batch-cpu multiplied by the node's CPU normalization ratio
/// (as at node level), never negative. Third-party allocations are node-wide and not taken
/// from zones (as upstream).
pub fn zone_targets(zones: &[ZoneResult], ratio: NormalizationRatio) -> BTreeMap<String, Amounts> {
    zones
        .iter()
        .map(|zone| {
            let amounts = zone.amounts.floor_zero();
            let published = Amounts::new(ratio.amplify_milli(amounts.cpu), amounts.memory);
            (zone.name.clone(), published)
        })
        .collect()
}

/// The batch entries one zone of the object carries now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ZoneEntries {
    /// `capacity` of the batch-cpu / batch-memory entries.
    pub capacity: PublishedValues,
    /// `allocatable`.
    pub allocatable: PublishedValues,
    /// `available`.
    pub available: PublishedValues,
}

/// Whether the zones' batch entries are worth a write: the node rule applied to every entry
/// of every zone. A zone the calculation has no result for (added since, or unreadable) is
/// set to 0 where it carries batch entries (never removed, never added).
pub fn decide_zone_update(
    current: &BTreeMap<String, ZoneEntries>,
    targets: &BTreeMap<String, Amounts>,
    last_write: Option<Timestamp>,
    now: Timestamp,
    strategy: &BatchStrategy,
) -> UpdateDecision {
    let mut small_moves = false;
    for (name, entries) in current {
        let lists = [entries.capacity, entries.allocatable, entries.available];
        let desired = match targets.get(name) {
            Some(target) => PublishedValues::from_desired(Some(*target)),
            None => {
                // Zero what is there, nothing else.
                let zeroed = |present: Option<i64>| present.map(|_| 0);
                let present = lists
                    .iter()
                    .fold(PublishedValues::default(), |acc, list| PublishedValues {
                        cpu: acc.cpu.or(list.cpu),
                        memory: acc.memory.or(list.memory),
                    });
                PublishedValues {
                    cpu: zeroed(present.cpu),
                    memory: zeroed(present.memory),
                }
            }
        };
        if lists.iter().all(|list| *list == desired) {
            continue;
        }
        if let Some(reason) = update::significant_change(&lists, desired, strategy.resource_diff_threshold) {
            return UpdateDecision::Write(reason);
        }
        small_moves = true;
    }
    if small_moves {
        update::after_small_moves(last_write, now, strategy)
    } else {
        UpdateDecision::Unchanged
    }
}
