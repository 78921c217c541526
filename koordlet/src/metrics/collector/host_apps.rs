//! The host-application part of a round: the CPU and memory of each host application the
//! NodeSLO declares (`hostApplications`), read from its cgroup exactly as a pod's, into the pod
//! store under the application's name.
//!
//! An application without a cgroup path (or with one that leaves the cgroup tree) is not
//! measured. When the NodeSLO stops declaring an application, or moves it to another cgroup,
//! its series are dropped.

use std::collections::HashMap;

use koord_api::nodemetric::MemoryCollectPolicy;
use koord_api::nodeslo::HostApplicationSpec;

use super::numa::NumaRound;
use super::slots::CgroupSlots;
use super::{RoundSummary, append};
use crate::metrics::{MetricKind, MetricStore, MetricTime, SeriesKey};
use crate::system::kube_paths::host_app_dir;
use crate::system::{CgroupDir, Cgroups, KubeCgroupPaths};

#[derive(Debug)]
struct Tracked {
    dir: CgroupDir,
    round: u64,
    slots: CgroupSlots,
}

/// Usage of all host applications in one round.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct HostAppTotals {
    /// Σ CPU (cores) of the applications with a rate this round.
    pub(super) cpu: f64,
    /// False when an application's CPU has no rate yet (its first reading): the system CPU of
    /// the round would count it as system usage.
    pub(super) cpu_complete: bool,
    /// Σ memory (bytes).
    pub(super) memory: f64,
}

/// The applications followed between rounds, by name.
#[derive(Debug, Default)]
pub(super) struct HostAppCollector {
    apps: HashMap<Box<str>, Tracked>,
    round: u64,
}

/// What one host-application round reads with.
pub(super) struct HostAppRound<'a> {
    pub(super) cgroups: &'a Cgroups,
    pub(super) paths: &'a KubeCgroupPaths,
    pub(super) buf: &'a mut Vec<u8>,
    pub(super) now: MetricTime,
    pub(super) policy: MemoryCollectPolicy,
}

impl HostAppCollector {
    /// Applications whose previous CPU counter is held.
    pub(super) fn tracked(&self) -> usize {
        self.apps.values().filter(|t| t.slots.has_cpu_counter()).count()
    }

    /// Measures `apps` (the first of duplicate names wins), appends their series to `store`
    /// and their NUMA memory to `numa`, and drops the series of applications no longer
    /// declared.
    pub(super) fn collect(
        &mut self,
        apps: &[HostApplicationSpec],
        r: HostAppRound<'_>,
        mut numa: Option<&mut NumaRound>,
        store: &mut MetricStore,
        summary: &mut RoundSummary,
    ) -> HostAppTotals {
        self.round += 1;
        let round = self.round;
        let mut totals = HostAppTotals {
            cpu: 0.0,
            cpu_complete: true,
            memory: 0.0,
        };
        for app in apps {
            let Some(dir) = host_app_dir(app, r.paths) else {
                continue;
            };
            let name = app.name.as_str();
            let fresh = match self.apps.get(name) {
                Some(t) if t.round == round => continue,
                Some(t) => t.dir != dir,
                None => true,
            };
            if fresh {
                // New, or moved to another cgroup: start over.
                remove_series(store, name);
                let slots = CgroupSlots::default();
                self.apps.insert(name.into(), Tracked { dir, round, slots });
            }
            let Some(tracked) = self.apps.get_mut(name) else {
                continue;
            };
            tracked.round = round;
            let dir = || tracked.dir.clone();
            match tracked.slots.read_cpu(r.cgroups, &dir, r.buf, r.now) {
                Ok(Some(cores)) => {
                    append(store, MetricKind::HostAppCpuUsage, name, r.now, cores, summary);
                    totals.cpu += cores;
                }
                Ok(None) => totals.cpu_complete = false,
                Err(_) => summary.read_errors += 1,
            }
            match tracked.slots.read_memory(r.cgroups, &dir, r.buf, r.policy) {
                Ok(bytes) => {
                    append(store, MetricKind::HostAppMemoryUsage, name, r.now, bytes, summary);
                    totals.memory += bytes;
                }
                Err(_) => summary.read_errors += 1,
            }
            if let Some(numa) = numa.as_deref_mut()
                && tracked
                    .slots
                    .add_numa_memory(r.cgroups, &dir, r.buf, r.policy, &numa.ids, &mut numa.cgroups)
                    .is_err()
            {
                summary.read_errors += 1;
            }
        }
        let gone: Vec<Box<str>> = self
            .apps
            .iter()
            .filter(|(_, t)| t.round != round)
            .map(|(name, _)| name.clone())
            .collect();
        for name in gone {
            self.apps.remove(&name);
            remove_series(store, &name);
            summary.dropped_objects += 1;
        }
        totals
    }
}

fn remove_series(store: &mut MetricStore, name: &str) {
    for kind in [MetricKind::HostAppCpuUsage, MetricKind::HostAppMemoryUsage] {
        store.remove_series(&SeriesKey::of(kind, name));
    }
}
