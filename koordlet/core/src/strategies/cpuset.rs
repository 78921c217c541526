//! CPU lists and the topology-aware choice of the CPUs BE pods may run on.
//!
//! Suppress in `cpuset` mode gives BE a number of CPUs; which ones matters: whole physical
//! cores (both hyper-thread siblings) keep BE off the cores LS threads run on, and spreading
//! over NUMA nodes keeps BE from saturating one node's memory bandwidth (upstream's choice).

use std::collections::{BTreeMap, BTreeSet};

/// The crate's CPU set (one type for the system layer and the strategies).
pub use crate::CpuSet as CpuList;

/// Where one logical CPU sits: its physical core, socket and NUMA node (from `lscpu -e` or sysfs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuInfo {
    /// Logical CPU id.
    pub cpu: u32,
    /// Physical core id (hyper-thread siblings share it within a socket).
    pub core: u32,
    /// Socket id.
    pub socket: u32,
    /// NUMA node id.
    pub node: u32,
}

/// Chooses `count` CPUs out of `candidates` for BE: whole cores (hyper-thread pairs) first,
/// round-robin over the (socket, NUMA node) groups, then single threads.
///
/// Groups are visited largest first (ties: lowest first CPU id); inside a group cores are taken
/// in (core, cpu) order. The result has `min(count, usable candidates)` CPUs; candidates
/// missing from `topology` are used last, in id order, so a partial topology still works.
pub fn select_cpus(topology: &[CpuInfo], candidates: &CpuList, count: usize) -> CpuList {
    // (socket, node) -> core -> cpus, only candidates, no duplicates.
    let mut groups: BTreeMap<(u32, u32), BTreeMap<u32, Vec<u32>>> = BTreeMap::new();
    let mut known = BTreeSet::new();
    for info in topology {
        if candidates.contains(info.cpu) && known.insert(info.cpu) {
            groups
                .entry((info.socket, info.node))
                .or_default()
                .entry(info.core)
                .or_default()
                .push(info.cpu);
        }
    }
    let mut buckets: Vec<Vec<Vec<u32>>> = groups
        .into_values()
        .map(|cores| {
            cores
                .into_values()
                .map(|mut cpus| {
                    cpus.sort_unstable();
                    cpus
                })
                .collect()
        })
        .collect();
    let size = |b: &Vec<Vec<u32>>| b.iter().map(Vec::len).sum::<usize>();
    let first = |b: &Vec<Vec<u32>>| b.iter().flatten().min().copied().unwrap_or(u32::MAX);
    buckets.sort_by(|a, b| size(b).cmp(&size(a)).then(first(a).cmp(&first(b))));

    let mut chosen = BTreeSet::new();
    let mut need = count;
    // Phase 1 takes hyper-thread pairs (two free threads of one core), phase 2 single threads
    // (from the most broken core first, keeping whole cores for LS). One pick per group per
    // turn; the turn carries over from phase 1 to phase 2 so the spread stays even.
    let groups_len = buckets.len();
    let mut cursor = 0usize;
    for width in [2usize, 1] {
        let mut misses = 0;
        while need >= width && groups_len > 0 && misses < groups_len {
            let bucket = &mut buckets[cursor % groups_len];
            cursor += 1;
            let core = bucket.iter_mut().filter(|c| c.len() >= width).min_by_key(|c| {
                // pairs: first core in order; singles: the core with the fewest free threads.
                if width == 2 { 0 } else { c.len() }
            });
            match core {
                Some(core) => {
                    chosen.extend(core.drain(..width));
                    need -= width;
                    misses = 0;
                }
                None => misses += 1,
            }
        }
    }
    // Candidates the topology does not describe: last resort, lowest ids first.
    for cpu in candidates.iter().filter(|c| !known.contains(c)) {
        if need == 0 {
            break;
        }
        chosen.insert(cpu);
        need -= 1;
    }
    CpuList::from_cpus(chosen)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2 sockets × 1 NUMA node each × `cores` cores × 2 threads; siblings are `c` and `c + n/2`
    /// as on most Intel servers.
    pub(crate) fn two_socket_ht(cores_per_socket: u32) -> Vec<CpuInfo> {
        let half = cores_per_socket * 2;
        (0..half * 2)
            .map(|cpu| {
                let phys = cpu % half; // physical core index over both sockets
                let socket = phys / cores_per_socket;
                CpuInfo {
                    cpu,
                    core: phys,
                    socket,
                    node: socket,
                }
            })
            .collect()
    }

    #[test]
    fn parse_and_format_round_trip() {
        for (text, want) in [
            ("", ""),
            ("0", "0"),
            ("0-3", "0-3"),
            ("0-1,3,5-7", "0-1,3,5-7"),
            (" 3,1,2 \n", "1-3"),
            ("0,0,0-1", "0-1"),
        ] {
            assert_eq!(CpuList::parse(text).unwrap().to_string(), want, "{text:?}");
        }
    }

    #[test]
    fn parse_rejects_garbage() {
        let many = (0..4)
            .map(|i| format!("{}-{}", i * 40_000, i * 40_000 + 39_999))
            .collect::<Vec<_>>()
            .join(",");
        for bad in ["a", "3-1", "-1", "1-", "1--2", "0-4294967295", many.as_str()] {
            assert!(CpuList::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn pairs_first_round_robin_over_sockets() {
        let topo = two_socket_ht(4); // cpus 0-15; core k has cpus k and k+8; socket 0 = cores 0-3
        let all = CpuList::from_cpus(0..16);
        // 4 CPUs: one pair on each socket.
        assert_eq!(select_cpus(&topo, &all, 4).to_string(), "0,4,8,12");
        // 3 CPUs: one pair on socket 0, then a single from socket 1.
        assert_eq!(select_cpus(&topo, &all, 3).to_string(), "0,4,8");
        // 2 CPUs: a whole core, never two threads of different cores.
        assert_eq!(select_cpus(&topo, &all, 2).to_string(), "0,8");
    }

    #[test]
    fn never_leaves_candidates_and_caps_at_available() {
        let topo = two_socket_ht(2); // cpus 0-7, core k = {k, k+4}
        let candidates = CpuList::parse("1,2,5,6").unwrap();
        let got = select_cpus(&topo, &candidates, 10);
        assert_eq!(got, candidates);
        let got = select_cpus(&topo, &candidates, 2);
        assert!(got.is_subset(&candidates));
        assert_eq!(got.to_string(), "1,5", "the free pair (core 1) beats two singles");
    }

    #[test]
    fn broken_pairs_fall_back_to_singles() {
        let topo = two_socket_ht(2);
        // Only one thread of each core is free: no pair exists.
        let candidates = CpuList::parse("0-3").unwrap();
        assert_eq!(select_cpus(&topo, &candidates, 3).len(), 3);
    }

    #[test]
    fn larger_group_first() {
        let topo = two_socket_ht(2);
        // Socket 1 (cores 2,3 → cpus 2,3,6,7) has 4 free, socket 0 only 2.
        let candidates = CpuList::parse("0,4,2,3,6,7").unwrap();
        assert_eq!(select_cpus(&topo, &candidates, 2).to_string(), "2,6");
    }

    /// Upstream's documented selection case (Test_calculateBESuppressCPUSetPolicy, "scattering on
    /// numa nodes and stacking on HTs 2/3"): 4 sockets × 2 cores × 2 adjacent threads, 2 NUMA
    /// nodes; 5 CPUs → a pair on socket 0, a pair on socket 1, a single on socket 2, whatever
    /// the order the topology lists the CPUs in.
    #[test]
    fn upstream_case_pairs_scatter_over_sockets() {
        let mut topo: Vec<CpuInfo> = (0..16)
            .map(|cpu| CpuInfo {
                cpu,
                core: cpu / 2,
                socket: cpu / 4,
                node: cpu / 8,
            })
            .collect();
        let all = CpuList::from_cpus(0..16);
        assert_eq!(select_cpus(&topo, &all, 5).to_string(), "0-1,4-5,8");
        topo.reverse();
        topo.swap(3, 11);
        assert_eq!(select_cpus(&topo, &all, 5).to_string(), "0-1,4-5,8");
    }

    #[test]
    fn unknown_cpus_used_last() {
        let topo = vec![CpuInfo {
            cpu: 0,
            core: 0,
            socket: 0,
            node: 0,
        }];
        let candidates = CpuList::parse("0,5").unwrap();
        assert_eq!(select_cpus(&topo, &candidates, 1).to_string(), "0");
        assert_eq!(select_cpus(&topo, &candidates, 2).to_string(), "0,5");
    }
}
