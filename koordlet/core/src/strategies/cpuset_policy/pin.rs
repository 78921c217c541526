//! From the table to cgroup writes: each container's target set, parents widened first.

use std::collections::{BTreeMap, BTreeSet};

use super::request::Table;
use super::{CpusetPolicyInput, PolicyPod, STRATEGY};
use crate::CgroupResource;
use crate::strategies::CgroupWrite;
use crate::strategies::cpu_suppress::CgroupState;
use crate::strategies::cpuset::CpuList;

/// One pod's directories and the CPUs each container should have.
pub(super) struct PodTargets<'a> {
    pod: &'a PolicyPod,
    containers: Vec<(&'a CgroupState, CpuList)>,
}

pub(super) fn targets<'a>(
    input: &CpusetPolicyInput<'a>,
    table: &Table,
    shared: &CpuList,
    be_pool: &CpuList,
) -> Vec<PodTargets<'a>> {
    let mut out = Vec::new();
    for p in input.pods {
        if p.be && p.bound.is_none() && !input.manage_be {
            continue;
        }
        let be_pool = input.manage_be.then_some(be_pool);
        let containers = p
            .containers
            .iter()
            .filter_map(|c| {
                let dir = c.dir.as_ref()?;
                let allocated = table
                    .accepted
                    .get(&(p.uid.clone(), c.name.clone()))
                    .map(|a| &a.cpus);
                let cpus = container_cpus(p.bound.as_ref(), p.be, allocated, shared, be_pool)?;
                Some((dir, cpus))
            })
            .collect::<Vec<_>>();
        if !containers.is_empty() {
            out.push(PodTargets { pod: p, containers });
        }
    }
    out
}

/// The cpuset one container gets, in order: the CPUs the scheduler bound its pod to, the BE
/// pool for a BE pod (`None` when cpu_suppress owns BE cpusets: `be_pool` is `None`), its
/// allocation, else the shared pool. The round and the runtime hooks both decide with this, so
/// a container created between two rounds starts where the next round keeps it.
pub fn container_cpus(
    bound: Option<&CpuList>,
    be: bool,
    allocated: Option<&CpuList>,
    shared: &CpuList,
    be_pool: Option<&CpuList>,
) -> Option<CpuList> {
    let cpus = match (bound, be, allocated) {
        (Some(bound), _, _) => bound.clone(),
        (None, true, _) => be_pool?.clone(),
        (None, false, Some(allocated)) => allocated.clone(),
        (None, false, None) => shared.clone(),
    };
    (!cpus.is_empty()).then_some(cpus)
}

/// Parents first, widened (never narrowed) to hold their children's targets; then the
/// containers, whose new set then always fits in their parent.
pub(super) fn writes(targets: &[PodTargets<'_>]) -> Vec<CgroupWrite> {
    let mut writes = Vec::new();
    let mut qos_need: BTreeMap<String, (&CgroupState, CpuList)> = BTreeMap::new();
    for t in targets {
        let need = t
            .containers
            .iter()
            .fold(CpuList::new(), |acc, (_, c)| acc.union(c));
        let entry = qos_need
            .entry(t.pod.qos_dir.dir.to_string())
            .or_insert((&t.pod.qos_dir, CpuList::new()));
        entry.1 = entry.1.union(&need);
    }
    let widen = |state: &CgroupState, need: &CpuList, writes: &mut Vec<CgroupWrite>| {
        if let Some(cur) = &state.cpuset
            && !need.is_subset(cur)
        {
            writes.push(CgroupWrite::cpus(
                &state.dir,
                CgroupResource::CpusetCpus,
                &cur.union(need),
                STRATEGY,
            ));
        }
    };
    for (state, need) in qos_need.values() {
        widen(state, need, &mut writes);
    }
    let mut seen = BTreeSet::new();
    for t in targets {
        let need = t
            .containers
            .iter()
            .fold(CpuList::new(), |acc, (_, c)| acc.union(c));
        if seen.insert(t.pod.pod_dir.dir.to_string()) {
            widen(&t.pod.pod_dir, &need, &mut writes);
        }
    }
    for t in targets {
        for (dir, cpus) in &t.containers {
            if dir.cpuset.as_ref() != Some(cpus) {
                writes.push(CgroupWrite::cpus(
                    &dir.dir,
                    CgroupResource::CpusetCpus,
                    cpus,
                    STRATEGY,
                ));
            }
        }
    }
    writes
}
