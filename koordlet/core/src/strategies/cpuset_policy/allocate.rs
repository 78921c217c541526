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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::strategies::cpuset_policy::tests::{all, cpus, topo};

    #[test]
    fn cpuset_policy_take_packed_table() {
        let two = topo(1, 2, false);
        let eight = topo(1, 4, true); // cores {0,4} {1,5} {2,6} {3,7}
        let eight_2s = topo(2, 4, false); // socket 0 = 0-3, socket 1 = 4-7
        let big = topo(2, 24, true); // socket 0 = 0-23,48-71; core k = {k, k+48}
        for (name, t, free, count, want) in [
            (
                "2 cpus: the highest CPU, CPU 0 stays shared",
                &two,
                all(&two),
                1,
                Some("1"),
            ),
            ("2 cpus: both", &two, all(&two), 2, Some("0-1")),
            ("2 cpus: too many", &two, all(&two), 3, None),
            ("smt: a whole core", &eight, all(&eight), 2, Some("3,7")),
            ("smt: two whole cores", &eight, all(&eight), 4, Some("2-3,6-7")),
            (
                "smt: odd count takes a core plus one thread",
                &eight,
                all(&eight),
                3,
                Some("2-3,7"),
            ),
            // Fragmentation: cores 3 and 2 half used; one thread comes from a broken core.
            (
                "smt: a broken core before a whole one",
                &eight,
                cpus("0-2,4-5,7"),
                1,
                Some("7"),
            ),
            (
                "smt: whole cores first, remainder from a broken core",
                &eight,
                cpus("0-2,4-5,7"),
                3,
                Some("1,5,7"),
            ),
            (
                "smt: free threads only of broken cores",
                &eight,
                cpus("0-3"),
                3,
                Some("1-3"),
            ),
            (
                "2 sockets smt off: one socket fits",
                &eight_2s,
                all(&eight_2s),
                3,
                Some("5-7"),
            ),
            (
                "2 sockets: the tightest socket that fits",
                &eight_2s,
                cpus("1-3,4-7"),
                3,
                Some("1-3"),
            ),
            (
                "2 sockets: spans from the top socket",
                &eight_2s,
                all(&eight_2s),
                6,
                Some("2-7"),
            ),
            (
                "96 cpus: 24 CPUs stay on one socket, siblings together",
                &big,
                all(&big),
                24,
                Some("36-47,84-95"),
            ),
            (
                "96 cpus: the socket that fits best",
                &big,
                cpus("0-23,48-71,24-30"),
                7,
                Some("24-30"),
            ),
            (
                "96 cpus: 50 CPUs: a whole socket plus one core",
                &big,
                all(&big),
                50,
                Some("23-47,71-95"),
            ),
            ("96 cpus: odd request", &big, all(&big), 3, Some("46-47,95")),
            ("zero", &big, all(&big), 0, Some("")),
        ] {
            let got = take_packed(t, &free, count).map(|c| c.to_string());
            assert_eq!(got.as_deref(), want, "{name}");
            if let Some(got) = take_packed(t, &free, count) {
                assert!(got.is_subset(&free), "{name}: outside the free CPUs");
            }
        }
    }

    #[test]
    fn cpuset_policy_take_packed_unknown_cpus_last() {
        let t = topo(1, 2, false);
        assert_eq!(take_packed(&t, &cpus("0-1,5"), 2).unwrap().to_string(), "0-1");
        assert_eq!(take_packed(&t, &cpus("0-1,5"), 3).unwrap().to_string(), "0-1,5");
    }
}
