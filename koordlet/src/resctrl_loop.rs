//! The live resctrl reconcile (gate `RdtResctrl`), run after every QoS round: decide the class
//! groups' schemata with the core's resctrl strategy, write the lines that differ (one audit
//! line each) and move the tasks of the pods of enabled classes into their group, picking up
//! new tasks every round.
//!
//! Started only when the node supports it ([`start`]): otherwise one log line says why and the
//! rest of the agent runs as before. What [`start`] found also tells the runtime hooks whether
//! they may start containers in their class group ([`rdt_availability`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use koord_api::NodeSLOSpec;
use koordlet_core::resctrl::{ResctrlFacts, ResctrlGroup, Schemata};
use koordlet_core::strategies::resctrl::{self, ResctrlPlan};
use tracing::{info, warn};

use crate::nri::RdtAvailability;
use crate::states::PodMeta;
use crate::system::resctrl::{ResctrlFs, ResctrlUnsupported, detect, parse_ids};
use crate::system::{
    CgroupDir, CgroupResource, CgroupVersion, Cgroups, KubeCgroupPaths, SystemError, SystemRoots,
};
use koordlet_core::features::FeatureGates;

/// What one reconcile did.
#[derive(Debug, Default)]
pub struct ResctrlRoundReport {
    /// The decision.
    pub plan: Option<ResctrlPlan>,
    /// Schemata lines written (or, in dry-run, logged): group, old line, new line.
    pub written: Vec<(ResctrlGroup, String, String)>,
    /// Tasks moved, per group.
    pub moved: BTreeMap<ResctrlGroup, usize>,
    /// What failed (a write the kernel refused, an unreadable file).
    pub errors: Vec<String>,
}

/// Applies the resctrl strategy to one node's resctrl tree.
pub struct ResctrlReconciler {
    fs: ResctrlFs,
    facts: ResctrlFacts,
    cgroups: Arc<Cgroups>,
    paths: KubeCgroupPaths,
    dry_run: bool,
    /// Errors logged and not cleared since, so a persistent failure is logged once.
    logged: BTreeSet<String>,
}

/// Why resctrl is off on this node.
#[derive(Debug, thiserror::Error)]
pub enum ResctrlOff {
    /// Feature gate `RdtResctrl` is off.
    #[error("feature gate RdtResctrl is off")]
    GateOff,
    /// The node does not support it, or the tree cannot be read.
    #[error(transparent)]
    Unsupported(#[from] ResctrlUnsupported),
}

/// Starts resctrl when the gate is on and the node supports it; otherwise logs one line with
/// the reason and returns it.
pub fn start(
    gates: &FeatureGates,
    roots: &SystemRoots,
    mount_allowed: bool,
    cgroups: Arc<Cgroups>,
    paths: KubeCgroupPaths,
    dry_run: bool,
) -> Result<ResctrlReconciler, ResctrlOff> {
    if !gates.enabled("RdtResctrl") {
        info!(
            strategy = resctrl::STRATEGY,
            "resctrl off: feature gate RdtResctrl is off"
        );
        return Err(ResctrlOff::GateOff);
    }
    let started = detect(roots, mount_allowed).and_then(|(fs, vendor)| {
        let facts = fs.read_facts(vendor)?;
        Ok((fs, facts))
    });
    match started {
        Ok((fs, facts)) => {
            info!(strategy = resctrl::STRATEGY, root = %fs.root().display(), vendor = ?facts.vendor,
                  "resctrl on");
            Ok(ResctrlReconciler::new(fs, facts, cgroups, paths, dry_run))
        }
        Err(e) => {
            info!(strategy = resctrl::STRATEGY, reason = %e, "resctrl off: not supported on this node");
            Err(e.into())
        }
    }
}

/// What the runtime hooks may do with resctrl classes, given what [`start`] found: name the
/// round's groups only where the round runs and moves tasks (not in dry-run).
pub fn rdt_availability(started: &Result<ResctrlReconciler, ResctrlOff>) -> RdtAvailability {
    match started {
        Ok(r) if r.dry_run => RdtAvailability::DryRun,
        Ok(r) => RdtAvailability::Mounted(r.fs.root().to_path_buf()),
        Err(ResctrlOff::GateOff) => RdtAvailability::GateOff,
        Err(e @ ResctrlOff::Unsupported(_)) => RdtAvailability::Unsupported(e.to_string()),
    }
}

impl ResctrlReconciler {
    /// A reconciler on a tree whose facts were read already.
    pub fn new(
        fs: ResctrlFs,
        facts: ResctrlFacts,
        cgroups: Arc<Cgroups>,
        paths: KubeCgroupPaths,
        dry_run: bool,
    ) -> Self {
        Self {
            fs,
            facts,
            cgroups,
            paths,
            dry_run,
            logged: BTreeSet::new(),
        }
    }

    /// One reconcile: schemata first, then tasks.
    pub fn round(&mut self, slo: &NodeSLOSpec, pods: &[PodMeta]) -> ResctrlRoundReport {
        let plan = resctrl::decide(slo, &self.facts, pods);
        let mut report = ResctrlRoundReport::default();
        for g in &plan.groups {
            for e in &g.errors {
                report.errors.push(format!("resctrl/{}: {e}", g.group));
            }
        }
        for group in ResctrlGroup::ALL {
            self.write_group(group, &plan, &mut report);
        }
        self.move_tasks(&plan, pods, &mut report);
        let now: BTreeSet<String> = report.errors.iter().cloned().collect();
        for e in now.difference(&self.logged) {
            warn!(strategy = resctrl::STRATEGY, error = %e, "resctrl");
        }
        self.logged = now;
        report.plan = Some(plan);
        report
    }

    fn write_group(&self, group: ResctrlGroup, plan: &ResctrlPlan, report: &mut ResctrlRoundReport) {
        let target = format!("resctrl/{group}");
        let writes: Vec<_> = plan.writes.iter().filter(|w| w.group == group).collect();
        if writes.is_empty() {
            return;
        }
        let current = if self.fs.group_dir(group).is_dir() {
            match self.fs.group_schemata(group) {
                Ok(s) => s,
                Err(e) => return report.errors.push(format!("{target}: {e}")),
            }
        } else if self.dry_run {
            info!(target: "koordlet::audit", cgroup = %target, strategy = resctrl::STRATEGY, dry_run = true,
                  "resctrl group would be created");
            Schemata::default()
        } else {
            match self.fs.ensure_group(group) {
                Ok(_) => {
                    info!(target: "koordlet::audit", cgroup = %target, strategy = resctrl::STRATEGY, "resctrl group created");
                    self.fs.group_schemata(group).unwrap_or_default()
                }
                Err(e) => return report.errors.push(format!("{target}: {e}")),
            }
        };
        for w in writes {
            let old = current.line(&w.line.resource);
            if old.is_some_and(|o| w.line.is_satisfied_by(o)) {
                continue;
            }
            let old = old.map(ToString::to_string).unwrap_or_default();
            let new = w.line.to_string();
            let change = format!("{old} -> {new}");
            if self.dry_run {
                info!(target: "koordlet::audit", cgroup = %target, file = "schemata", change, strategy = w.strategy,
                      dry_run = true, "resctrl write (dry-run, not written)");
            } else if let Err(e) = self.fs.write_line(group, &w.line) {
                report.errors.push(format!("{target}/schemata {new}: {e}"));
                continue;
            } else {
                info!(target: "koordlet::audit", cgroup = %target, file = "schemata", change, strategy = w.strategy,
                      "resctrl write");
            }
            report.written.push((group, old, new));
        }
    }

    fn move_tasks(&self, plan: &ResctrlPlan, pods: &[PodMeta], report: &mut ResctrlRoundReport) {
        let mut in_group: BTreeMap<ResctrlGroup, BTreeSet<u32>> = BTreeMap::new();
        for pg in &plan.pods {
            let Some(pod) = pods.iter().find(|p| p.uid.as_str() == pg.uid) else {
                continue;
            };
            let target = format!("resctrl/{}", pg.group);
            let members = match in_group.entry(pg.group) {
                std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
                std::collections::btree_map::Entry::Vacant(v) => match self.fs.group_tasks(pg.group) {
                    Ok(t) => v.insert(t),
                    // Dry-run never created the group.
                    Err(_) if self.dry_run => v.insert(BTreeSet::new()),
                    Err(e) => {
                        report.errors.push(format!("{target}/tasks: {e}"));
                        continue;
                    }
                },
            };
            let tids = match self.pod_tasks(&pod.cgroup_dir(&self.paths)) {
                Ok(t) => t,
                Err(e) => {
                    report
                        .errors
                        .push(format!("pod {}/{} tasks: {e}", pod.namespace, pod.name));
                    continue;
                }
            };
            let mut moved = 0usize;
            for tid in resctrl::tasks_to_move(members, tids) {
                if self.dry_run {
                    moved += 1;
                    continue;
                }
                match self.fs.add_task(pg.group, tid) {
                    Ok(true) => {
                        members.insert(tid);
                        moved += 1;
                    }
                    Ok(false) => {}
                    Err(e) => report.errors.push(format!("{target}/tasks {tid}: {e}")),
                }
            }
            if moved > 0 {
                info!(target: "koordlet::audit", cgroup = %target, file = "tasks", change = format!("+{moved} tasks"),
                      pod = format!("{}/{}", pod.namespace, pod.name), strategy = resctrl::STRATEGY,
                      dry_run = self.dry_run, "resctrl tasks moved");
                *report.moved.entry(pg.group).or_default() += moved;
            }
        }
    }

    /// Task ids of a pod: its own cgroup and every container (and sandbox) cgroup below it.
    /// A pod whose cgroup does not exist (yet) has none.
    fn pod_tasks(&self, pod_dir: &CgroupDir) -> Result<BTreeSet<u32>, SystemError> {
        let base = self.cgroups.dir_path(CgroupResource::CpuShares, pod_dir)?;
        let file = match self.cgroups.version() {
            CgroupVersion::V1 => "tasks",
            // cgroup.procs lists processes only; resctrl moves threads.
            CgroupVersion::V2 => "cgroup.threads",
        };
        let mut dirs = vec![base.clone()];
        match std::fs::read_dir(&base) {
            Ok(entries) => dirs.extend(
                entries
                    .filter_map(Result::ok)
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path()),
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeSet::new()),
            Err(source) => return Err(SystemError::Io { path: base, source }),
        }
        let mut tids = BTreeSet::new();
        for dir in dirs {
            let path = dir.join(file);
            match std::fs::read_to_string(&path) {
                Ok(text) => tids.extend(parse_ids(&path, &text)?),
                // A container that went away between the listing and the read.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => return Err(SystemError::Io { path, source }),
            }
        }
        Ok(tids)
    }
}
