//! Topology-aware choice of the CPUs a container gets for itself (policies `exclusive` and
//! `share`).
//!
//! The opposite of BE suppress's spreading ([`crate::strategies::cpuset::select_cpus`]): a
//! pinned LS container wants its CPUs close together, so they share caches and memory
//! controller and its threads do not bounce between sockets. The rules:
//!
//! 1. One (socket, NUMA node) group when any group has enough free CPUs: the tightest such
//!    group (fewest free CPUs), so big free groups stay whole for big requests. Otherwise
//!    groups by most free CPUs first, so the request spans as few as possible.
//! 2. Inside a group, whole free physical cores first (hyper-thread siblings together); the
//!    remainder (fewer CPUs than a core has threads) comes from cores another container
//!    already broke, before a whole core is split.
//! 3. Pinned containers are packed from the highest CPU ids down (ties between groups and
//!    cores go to the higher ids): CPU 0, where the kernel and node daemons tend to run, is
//!    the last to leave the shared pool.
//! 4. CPUs the topology does not describe are used last, one by one.

use std::collections::{BTreeMap, BTreeSet};

use crate::strategies::cpuset::{CpuInfo, CpuList};

/// One physical core's free threads and its size (threads the topology lists for it).
#[derive(Debug)]
struct Core {
    size: usize,
    free: Vec<u32>,
}

impl Core {
    fn first(&self) -> u32 {
        self.free.first().copied().unwrap_or(0)
    }
}

/// Chooses `count` CPUs out of `free`, packed as the module documents; `None` when `free` has
/// fewer than `count` CPUs (nothing is half-chosen).
pub fn take_packed(topology: &[CpuInfo], free: &CpuList, count: usize) -> Option<CpuList> {
    if count == 0 {
        return Some(CpuList::new());
    }
    if free.len() < count {
        return None;
    }
    // (socket, node) -> (core) -> Core; only CPUs of the topology, each once.
    let mut groups: BTreeMap<(u32, u32), BTreeMap<u32, Core>> = BTreeMap::new();
    let mut known = BTreeSet::new();
    for info in topology {
        if !known.insert(info.cpu) {
            continue;
        }
        let core = groups
            .entry((info.socket, info.node))
            .or_default()
            .entry(info.core)
            .or_insert(Core {
                size: 0,
                free: Vec::new(),
            });
        core.size += 1;
        if free.contains(info.cpu) {
            core.free.push(info.cpu);
        }
    }
    let mut groups: Vec<Vec<Core>> = groups
        .into_values()
        .map(|cores| {
            let mut cores: Vec<Core> = cores
                .into_values()
                .filter(|c| !c.free.is_empty())
                .map(|mut c| {
                    c.free.sort_unstable();
                    c
                })
                .collect();
            cores.sort_by_key(|c| std::cmp::Reverse(c.first()));
            cores
        })
        .filter(|cores| !cores.is_empty())
        .collect();
    let free_of = |g: &Vec<Core>| g.iter().map(|c| c.free.len()).sum::<usize>();
    let top_of = |g: &Vec<Core>| g.first().map_or(0, Core::first);
    let tightest_fit = groups
        .iter()
        .enumerate()
        .filter(|(_, g)| free_of(g) >= count)
        .min_by_key(|(_, g)| (free_of(g), std::cmp::Reverse(top_of(g))))
        .map(|(i, _)| i);
    match tightest_fit {
        Some(i) => {
            let g = groups.swap_remove(i);
            groups = vec![g];
        }
        None => groups.sort_by_key(|g| (std::cmp::Reverse(free_of(g)), std::cmp::Reverse(top_of(g)))),
    }

    let mut chosen = BTreeSet::new();
    let mut need = count;
    for cores in &mut groups {
        if need == 0 {
            break;
        }
        take_from_group(cores, &mut need, &mut chosen);
    }
    let unknown: Vec<u32> = free.iter().filter(|c| !known.contains(c)).collect();
    for cpu in unknown.into_iter().rev() {
        if need == 0 {
            break;
        }
        chosen.insert(cpu);
        need -= 1;
    }
    (need == 0).then(|| CpuList::from_cpus(chosen))
}

/// Whole free cores while they fit, then threads of broken cores, then of split whole cores.
fn take_from_group(cores: &mut [Core], need: &mut usize, chosen: &mut BTreeSet<u32>) {
    for core in cores.iter_mut() {
        if core.free.len() == core.size && core.size <= *need {
            *need -= core.size;
            chosen.extend(core.free.drain(..));
        }
    }
    if *need == 0 {
        return;
    }
    let mut rest: Vec<&mut Core> = cores.iter_mut().filter(|c| !c.free.is_empty()).collect();
    // Broken cores (some thread already taken) before whole ones; then the core with the fewest
    // free threads, so as few cores as possible are touched; higher ids first.
    rest.sort_by_key(|c| (c.free.len() == c.size, c.free.len(), std::cmp::Reverse(c.first())));
    for core in rest {
        if *need == 0 {
            return;
        }
        let n = (*need).min(core.free.len());
        chosen.extend(core.free.drain(..n));
        *need -= n;
    }
}
