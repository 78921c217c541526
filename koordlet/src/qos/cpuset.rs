//! CPU lists and the topology-aware choice of the CPUs BE pods may run on.
//!
//! Suppress in `cpuset` mode gives BE a number of CPUs; which ones matters: whole physical
//! cores (both hyper-thread siblings) keep BE off the cores LS threads run on, and spreading
//! over NUMA nodes keeps BE from saturating one node's memory bandwidth (upstream's choice).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use thiserror::Error;

/// More CPUs than any machine has: an id beyond this is garbage, refused before it costs memory.
const MAX_CPUS: u32 = 65_536;

/// A set of logical CPU ids, printed in the kernel's list format (`0-3,8,10-11`).
///
/// A bitset (one bit per CPU, no trailing zero words, so equality is set equality): suppress
/// compares and merges the cpusets of every BE cgroup each round, which must stay cheap.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct CpuList {
    words: Vec<u64>,
}

/// A CPU list the kernel format does not allow.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum CpuListError {
    /// A part is neither `N` nor `N-M` with `N <= M`.
    #[error("invalid CPU list element {0:?}")]
    InvalidElement(String),
    /// A CPU id no machine has (≥ 65536).
    #[error("CPU list element {0:?} names a CPU beyond 65535")]
    RangeTooLarge(String),
}

impl CpuList {
    /// Builds a list from CPU ids (ids ≥ 65536 are ignored: no such CPU exists).
    pub fn from_cpus(cpus: impl IntoIterator<Item = u32>) -> Self {
        let mut list = CpuList::default();
        for cpu in cpus.into_iter().filter(|c| *c < MAX_CPUS) {
            list.insert_range(cpu, cpu);
        }
        list
    }

    /// Sets CPUs `a..=b` (`a <= b < MAX_CPUS`), a word at a time.
    fn insert_range(&mut self, a: u32, b: u32) {
        let (first, last) = ((a / 64) as usize, (b / 64) as usize);
        if self.words.len() <= last {
            self.words.resize(last + 1, 0);
        }
        for (i, word) in self.words.iter_mut().enumerate().take(last + 1).skip(first) {
            let lo = if i == first { a % 64 } else { 0 };
            let hi = if i == last { b % 64 } else { 63 };
            let mask = (u64::MAX >> (63 - hi)) & (u64::MAX << lo);
            *word |= mask;
        }
    }

    fn from_words(mut words: Vec<u64>) -> Self {
        while words.last() == Some(&0) {
            words.pop();
        }
        CpuList { words }
    }

    fn word(&self, i: usize) -> u64 {
        self.words.get(i).copied().unwrap_or(0)
    }

    /// Parses the kernel list format; empty or whitespace-only text is the empty set.
    pub fn parse(text: &str) -> Result<Self, CpuListError> {
        let mut list = CpuList::default();
        for part in text.trim().split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let bad = || CpuListError::InvalidElement(part.to_owned());
            let (a, b) = match part.split_once('-') {
                Some((a, b)) => (
                    a.trim().parse::<u32>().map_err(|_| bad())?,
                    b.trim().parse::<u32>().map_err(|_| bad())?,
                ),
                None => {
                    let a = part.parse::<u32>().map_err(|_| bad())?;
                    (a, a)
                }
            };
            if a > b {
                return Err(bad());
            }
            if b >= MAX_CPUS {
                return Err(CpuListError::RangeTooLarge(part.to_owned()));
            }
            list.insert_range(a, b);
        }
        Ok(list)
    }

    /// Number of CPUs.
    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Whether no CPU is in the list.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// Whether `cpu` is in the list.
    pub fn contains(&self, cpu: u32) -> bool {
        self.word((cpu / 64) as usize) & (1u64 << (cpu % 64)) != 0
    }

    /// Whether every CPU of `self` is in `other` (a cpuset write that narrows nothing).
    pub fn is_subset(&self, other: &CpuList) -> bool {
        self.words
            .iter()
            .enumerate()
            .all(|(i, w)| w & !other.word(i) == 0)
    }

    fn combine(&self, other: &CpuList, op: impl Fn(u64, u64) -> u64) -> CpuList {
        let n = self.words.len().max(other.words.len());
        CpuList::from_words((0..n).map(|i| op(self.word(i), other.word(i))).collect())
    }

    /// CPUs in either list.
    pub fn union(&self, other: &CpuList) -> CpuList {
        self.combine(other, |a, b| a | b)
    }

    /// CPUs of `self` not in `other`.
    pub fn difference(&self, other: &CpuList) -> CpuList {
        self.combine(other, |a, b| a & !b)
    }

    /// CPUs in both lists.
    pub fn intersection(&self, other: &CpuList) -> CpuList {
        self.combine(other, |a, b| a & b)
    }

    /// The CPUs in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.words.iter().enumerate().flat_map(|(i, &w)| {
            (0..64u32)
                .filter(move |bit| w & (1u64 << bit) != 0)
                .map(move |bit| i as u32 * 64 + bit)
        })
    }
}

impl fmt::Display for CpuList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut iter = self.iter().peekable();
        while let Some(start) = iter.next() {
            let mut end = start;
            while iter.peek() == Some(&(end + 1)) {
                end += 1;
                iter.next();
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if end == start {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
        }
        Ok(())
    }
}

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
