//! The NUMA part of a round: each NUMA node's CPU usage (the busy ticks of its CPUs' `cpuN`
//! lines in `/proc/stat`, as a rate) and memory (its sysfs `meminfo`), and its system memory
//! (node memory minus the pods' and host applications' memory on it, from `memory.numa_stat`).
//!
//! Series are node-level, one object per NUMA node ID (`"0"`, `"1"`, ...). A NUMA node's system
//! CPU is not derived: cgroup v2 has no per-CPU usage counter, so the pods' CPU on one NUMA
//! node cannot be measured.

use std::collections::HashMap;

use koord_api::nodemetric::MemoryCollectPolicy;

use super::{RoundSummary, append};
use crate::metrics::{MetricKind, MetricStore, MetricTime};
use crate::system::SystemRoots;
use crate::system::numa::{NumaNode, read_numa_nodes};
use crate::system::proc_stat::{ProcStat, USER_HZ};

/// The NUMA nodes of one round and what was measured on them, by position.
#[derive(Debug, Default)]
pub(super) struct NumaRound {
    /// NUMA node IDs, ascending.
    pub(super) ids: Vec<u32>,
    /// The IDs as series objects.
    names: Vec<String>,
    /// Each node's memory under the round's policy (bytes).
    memory: Vec<f64>,
    /// Σ memory of the pods and host applications on each node (bytes).
    pub(super) cgroups: Vec<f64>,
}

/// State kept between rounds: each NUMA node's previous busy ticks.
#[derive(Debug, Default)]
pub(super) struct NumaCollector {
    prev_busy: HashMap<u32, (MetricTime, u64)>,
    /// Set after a failed read was reported, so a broken sysfs logs once.
    warned: bool,
}

/// Busy ticks (user + nice + system + irq + softirq) of the node's CPUs.
fn busy_ticks(node: &NumaNode, stat: &ProcStat) -> u64 {
    stat.per_cpu
        .iter()
        .filter(|(cpu, _)| node.cpus.contains(*cpu))
        .fold(0u64, |sum, (_, ticks)| sum.saturating_add(ticks.busy()))
}

impl NumaCollector {
    /// Reads the NUMA nodes and appends their CPU (from `stat`, when read) and memory series.
    /// `None` when the host has no NUMA node directory or it could not be read.
    pub(super) fn collect_nodes(
        &mut self,
        roots: &SystemRoots,
        stat: Option<&ProcStat>,
        now: MetricTime,
        policy: MemoryCollectPolicy,
        store: &mut MetricStore,
        summary: &mut RoundSummary,
    ) -> Option<NumaRound> {
        let nodes = match read_numa_nodes(roots) {
            Ok(nodes) if !nodes.is_empty() => nodes,
            Ok(_) => return None,
            Err(e) => {
                summary.read_errors += 1;
                if !std::mem::replace(&mut self.warned, true) {
                    tracing::warn!(error = %e, "NUMA nodes unreadable; numaUsages left out until they are");
                }
                return None;
            }
        };
        self.warned = false;
        let mut round = NumaRound::default();
        let mut prev = HashMap::with_capacity(nodes.len());
        for node in &nodes {
            let name = node.id.to_string();
            if let Some(stat) = stat {
                let busy = busy_ticks(node, stat);
                if let Some(&(t, before)) = self.prev_busy.get(&node.id) {
                    let secs = (now.as_millis() - t.as_millis()) as f64 / 1000.0;
                    if let (Some(ticks), true) = (busy.checked_sub(before), secs > 0.0) {
                        let cores = ticks as f64 / (secs * USER_HZ as f64);
                        append(store, MetricKind::NumaCpuUsage, &name, now, cores, summary);
                    }
                }
                prev.insert(node.id, (now, busy));
            }
            let without = node.memory.usage_without_page_cache() as f64;
            let with = node.memory.usage_with_page_cache() as f64;
            append(store, MetricKind::NumaMemoryUsage, &name, now, without, summary);
            append(
                store,
                MetricKind::NumaMemoryUsageWithPageCache,
                &name,
                now,
                with,
                summary,
            );
            round.ids.push(node.id);
            round.names.push(name);
            round
                .memory
                .push(if policy == MemoryCollectPolicy::UsageWithPageCache {
                    with
                } else {
                    without
                });
        }
        self.prev_busy = prev;
        round.cgroups = vec![0.0; round.ids.len()];
        Some(round)
    }
}

impl NumaRound {
    /// Appends each NUMA node's system memory: node memory minus the pods' and host
    /// applications' memory on it, floored at 0.
    pub(super) fn append_system(&self, now: MetricTime, store: &mut MetricStore, summary: &mut RoundSummary) {
        for ((name, node), cgroups) in self.names.iter().zip(&self.memory).zip(&self.cgroups) {
            append(
                store,
                MetricKind::NumaSysMemoryUsage,
                name,
                now,
                (node - cgroups).max(0.0),
                summary,
            );
        }
    }
}
