//! NUMA nodes: the CPUs of each (`/sys/devices/system/node/nodeN/cpulist`), its memory
//! (`nodeN/meminfo`), and how much of a cgroup's memory sits on each (`memory.numa_stat`).
//!
//! Memory is counted the same way on both sides, so a NUMA node's system usage (node minus
//! pods and host applications) subtracts like from like:
//! - node, without page cache: `MemTotal − (MemFree + Active(file) + Inactive(file) +
//!   SReclaimable)` (upstream's NUMA formula); with page cache: `MemTotal − MemFree`.
//! - cgroup, without page cache: anon + unevictable LRU pages on the node; with page cache:
//!   anon + file + unevictable.
//!
//! Parsers take the file's text and never panic.

use std::collections::BTreeMap;
use std::path::Path;

use super::{CgroupVersion, CpuSet, ParseError, SystemError, SystemRoots, read_text};

const MEMINFO: &str = "node meminfo";
const NUMA_STAT: &str = "memory.numa_stat";

/// The fields of a NUMA node's `meminfo` koordlet uses, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NumaMeminfo {
    /// `MemTotal`.
    pub mem_total: u64,
    /// `MemFree`.
    pub mem_free: u64,
    /// `Active(file)`.
    pub active_file: u64,
    /// `Inactive(file)`.
    pub inactive_file: u64,
    /// `SReclaimable`.
    pub sreclaimable: u64,
}

impl NumaMeminfo {
    /// Parses `nodeN/meminfo` (`Node 0 MemTotal:  16318412 kB` lines). `MemTotal` and `MemFree`
    /// are required; other fields default to 0; unknown lines are ignored.
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        let mut info = NumaMeminfo::default();
        let (mut total, mut free) = (false, false);
        for line in text.lines() {
            let Some((key, bytes)) = super::meminfo::entry(line) else {
                continue;
            };
            // `Node <id> <Field>`: the field is the last word before the colon.
            let Some(field) = key.split_whitespace().last() else {
                continue;
            };
            let slot = match field {
                "MemTotal" => {
                    total = true;
                    &mut info.mem_total
                }
                "MemFree" => {
                    free = true;
                    &mut info.mem_free
                }
                "Active(file)" => &mut info.active_file,
                "Inactive(file)" => &mut info.inactive_file,
                "SReclaimable" => &mut info.sreclaimable,
                _ => continue,
            };
            *slot = bytes;
        }
        match (total, free) {
            (true, true) => Ok(info),
            (false, _) => Err(ParseError::new(MEMINFO, "missing MemTotal")),
            (true, false) => Err(ParseError::new(MEMINFO, "missing MemFree")),
        }
    }

    /// Used memory without page cache or reclaimable slab (never negative).
    pub fn usage_without_page_cache(&self) -> u64 {
        self.mem_total.saturating_sub(
            self.mem_free
                .saturating_add(self.active_file)
                .saturating_add(self.inactive_file)
                .saturating_add(self.sreclaimable),
        )
    }

    /// Used memory, page cache included.
    pub fn usage_with_page_cache(&self) -> u64 {
        self.mem_total.saturating_sub(self.mem_free)
    }
}

/// One NUMA node as sysfs describes it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NumaNode {
    /// The node's ID (`nodeN`).
    pub id: u32,
    /// Its CPUs.
    pub cpus: CpuSet,
    /// Its memory.
    pub memory: NumaMeminfo,
}

/// The NUMA nodes under `<sys>/devices/system/node`, by ID. Empty when the directory does not
/// exist (a kernel built without NUMA support); a node whose `cpulist` or `meminfo` cannot be
/// read or parsed is an error, so a round never reports part of the machine.
pub fn read_numa_nodes(roots: &SystemRoots) -> Result<Vec<NumaNode>, SystemError> {
    let dir = roots.sys.join("devices/system/node");
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(SystemError::Io { path: dir, source }),
    };
    let mut nodes = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(id) = name
            .to_str()
            .and_then(|n| n.strip_prefix("node"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        nodes.push(read_node(&entry.path(), id)?);
    }
    nodes.sort_by_key(|n| n.id);
    Ok(nodes)
}

fn read_node(dir: &Path, id: u32) -> Result<NumaNode, SystemError> {
    let cpulist = dir.join("cpulist");
    let cpus = CpuSet::parse(&read_text(&cpulist)?).map_err(|e| SystemError::parse(cpulist, e))?;
    let meminfo = dir.join("meminfo");
    let memory = NumaMeminfo::parse(&read_text(&meminfo)?).map_err(|e| SystemError::parse(meminfo, e))?;
    Ok(NumaNode { id, cpus, memory })
}

/// The kernel's page size in bytes: the unit of v1 `memory.numa_stat`.
pub fn page_size() -> u64 {
    procfs::page_size()
}

/// A cgroup's memory on one NUMA node, bytes, split by LRU kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NumaPages {
    /// Anonymous memory (active + inactive).
    pub anon: u64,
    /// Page cache (active + inactive).
    pub file: u64,
    /// Unevictable memory.
    pub unevictable: u64,
}

impl NumaPages {
    /// Memory without page cache: anon + unevictable.
    pub fn without_page_cache(&self) -> u64 {
        self.anon.saturating_add(self.unevictable)
    }

    /// Memory with page cache: anon + file + unevictable.
    pub fn with_page_cache(&self) -> u64 {
        self.without_page_cache().saturating_add(self.file)
    }
}

/// A cgroup's `memory.numa_stat`: its memory per NUMA node, bytes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NumaStat {
    /// Memory by NUMA node ID.
    pub nodes: BTreeMap<u32, NumaPages>,
}

/// The rows read from a `memory.numa_stat`; v1 keys are listed hierarchical first.
const V1_ROWS: [(&str, Row); 6] = [
    ("hierarchical_anon", Row::Anon),
    ("hierarchical_file", Row::File),
    ("hierarchical_unevictable", Row::Unevictable),
    ("anon", Row::Anon),
    ("file", Row::File),
    ("unevictable", Row::Unevictable),
];
const V2_ROWS: [(&str, Row); 5] = [
    ("inactive_anon", Row::Anon),
    ("active_anon", Row::Anon),
    ("inactive_file", Row::File),
    ("active_file", Row::File),
    ("unevictable", Row::Unevictable),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Row {
    Anon,
    File,
    Unevictable,
}

impl NumaStat {
    /// Parses `memory.numa_stat` of the given version.
    ///
    /// - v1: `<key>=<total> N0=<pages> N1=<pages>` lines in pages of `page_size` bytes; the
    ///   `hierarchical_*` rows (the cgroup and its children, as a pod's memory is) win over the
    ///   local ones.
    /// - v2: `<key> N0=<bytes> N1=<bytes>` lines, always hierarchical; the LRU rows
    ///   (`inactive_anon`, `active_anon`, `inactive_file`, `active_file`, `unevictable`).
    ///
    /// A file with none of these rows is an error; malformed node fields are skipped.
    pub fn parse(text: &str, version: CgroupVersion, page_size: u64) -> Result<Self, ParseError> {
        let mut rows: BTreeMap<&str, Vec<(u32, u64)>> = BTreeMap::new();
        for line in text.lines() {
            let mut fields = line.split_whitespace();
            let Some(head) = fields.next() else { continue };
            let key = head.split_once('=').map_or(head, |(k, _)| k);
            let per_node: Vec<(u32, u64)> = fields
                .filter_map(|f| {
                    let (node, value) = f.strip_prefix('N')?.split_once('=')?;
                    Some((node.parse().ok()?, value.parse().ok()?))
                })
                .collect();
            rows.insert(key, per_node);
        }
        let (table, unit): (&[(&str, Row)], u64) = match version {
            CgroupVersion::V1 => (&V1_ROWS, page_size),
            CgroupVersion::V2 => (&V2_ROWS, 1),
        };
        let mut stat = NumaStat::default();
        let mut filled = [false; 3];
        let mut any = false;
        for (key, row) in table {
            let slot = *row as usize;
            // v1: the hierarchical row of a kind wins; the local one is read only without it.
            if version == CgroupVersion::V1 && filled[slot] {
                continue;
            }
            let Some(values) = rows.get(key) else { continue };
            any = true;
            if version == CgroupVersion::V1 {
                filled[slot] = true;
            }
            for &(node, value) in values {
                let pages = stat.nodes.entry(node).or_default();
                let field = match row {
                    Row::Anon => &mut pages.anon,
                    Row::File => &mut pages.file,
                    Row::Unevictable => &mut pages.unevictable,
                };
                *field = field.saturating_add(value.saturating_mul(unit));
            }
        }
        if !any {
            return Err(ParseError::new(NUMA_STAT, "no anon, file or unevictable row"));
        }
        Ok(stat)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODE0: &str = "Node 0 MemTotal:       16000 kB\nNode 0 MemFree:         2000 kB\n\
Node 0 MemUsed:        14000 kB\nNode 0 Active(file):    3000 kB\nNode 0 Inactive(file):  2500 kB\n\
Node 0 SReclaimable:     400 kB\nNode 0 HugePages_Total:     0\n";

    #[test]
    fn node_meminfo_in_bytes_and_both_policies() {
        let info = NumaMeminfo::parse(NODE0).unwrap();
        assert_eq!(info.mem_total, 16000 * 1024);
        assert_eq!(
            info.usage_without_page_cache(),
            (16000 - 2000 - 3000 - 2500 - 400) * 1024
        );
        assert_eq!(info.usage_with_page_cache(), 14000 * 1024);
        assert!(NumaMeminfo::parse("Node 0 MemFree: 1 kB\n").is_err());
        assert!(NumaMeminfo::parse("Node 0 MemTotal: 1 kB\n").is_err());
        // Reclaimable parts larger than the total (a torn read) floor at 0.
        let torn = NumaMeminfo {
            mem_total: 10,
            mem_free: 8,
            active_file: 5,
            ..NumaMeminfo::default()
        };
        assert_eq!(torn.usage_without_page_cache(), 0);
    }

    #[test]
    fn numa_stat_v1_in_pages_hierarchical_first() {
        let v1 = "total=30 N0=20 N1=10\nfile=10 N0=5 N1=5\nanon=15 N0=12 N1=3\nunevictable=5 N0=3 N1=2\n\
hierarchical_total=300 N0=200 N1=100\nhierarchical_file=100 N0=50 N1=50\nhierarchical_anon=150 N0=120 N1=30\n";
        let stat = NumaStat::parse(v1, CgroupVersion::V1, 4096).unwrap();
        let n0 = stat.nodes[&0];
        assert_eq!(n0.anon, 120 * 4096);
        assert_eq!(n0.file, 50 * 4096);
        // No hierarchical_unevictable row: the local one stands in.
        assert_eq!(n0.unevictable, 3 * 4096);
        assert_eq!(n0.without_page_cache(), 123 * 4096);
        assert_eq!(stat.nodes[&1].with_page_cache(), (30 + 50 + 2) * 4096);
    }

    #[test]
    fn numa_stat_v2_in_bytes_from_the_lru_rows() {
        let v2 = "anon 999 N0=999\nfile N0=7000 N1=0\ninactive_anon N0=100 N1=1\nactive_anon N0=200 N1=2\n\
inactive_file N0=3000 N1=0\nactive_file N0=4000 N1=0\nunevictable N0=5 N1=0\nslab_reclaimable N0=9\n";
        let stat = NumaStat::parse(v2, CgroupVersion::V2, 4096).unwrap();
        assert_eq!(
            stat.nodes[&0],
            NumaPages {
                anon: 300,
                file: 7000,
                unevictable: 5
            }
        );
        assert_eq!(stat.nodes[&1].without_page_cache(), 3);
        assert!(NumaStat::parse("slab_reclaimable N0=9\n", CgroupVersion::V2, 1).is_err());
        assert!(NumaStat::parse("", CgroupVersion::V1, 1).is_err());
        // Malformed node fields are skipped, the rest stands.
        let odd = NumaStat::parse("unevictable Nx=1 N0=abc N1=4 junk\n", CgroupVersion::V2, 1).unwrap();
        assert_eq!(odd.nodes.len(), 1);
        assert_eq!(odd.nodes[&1].unevictable, 4);
    }

    #[test]
    fn nodes_from_a_fake_sysfs() {
        let dir = tempfile::tempdir().unwrap();
        let roots = SystemRoots::under(dir.path());
        assert_eq!(read_numa_nodes(&roots).unwrap(), vec![]);
        let base = roots.sys.join("devices/system/node");
        for (id, cpus) in [(1, "2-3\n"), (0, "0-1\n")] {
            let node = base.join(format!("node{id}"));
            std::fs::create_dir_all(&node).unwrap();
            std::fs::write(node.join("cpulist"), cpus).unwrap();
            std::fs::write(
                node.join("meminfo"),
                NODE0.replace("Node 0", &format!("Node {id}")),
            )
            .unwrap();
        }
        // Not nodes: ignored.
        std::fs::create_dir_all(base.join("power")).unwrap();
        std::fs::write(base.join("online"), "0-1\n").unwrap();
        let nodes = read_numa_nodes(&roots).unwrap();
        assert_eq!(nodes.iter().map(|n| n.id).collect::<Vec<_>>(), vec![0, 1]);
        assert_eq!(nodes[1].cpus, CpuSet::from_cpus([2, 3]));
        assert_eq!(nodes[0].memory.mem_free, 2000 * 1024);
        std::fs::write(base.join("node1/cpulist"), "3-2\n").unwrap();
        assert!(matches!(read_numa_nodes(&roots), Err(SystemError::Parse { .. })));
    }

    /// This machine's own files, where it has them: every node parses, every CPU is on one.
    #[test]
    fn this_hosts_sysfs_and_root_numa_stat_parse() {
        let roots = SystemRoots::default();
        if !roots.sys.join("devices/system/node/node0").exists() {
            println!("skipped: no NUMA nodes in /sys");
            return;
        }
        let nodes = read_numa_nodes(&roots).unwrap();
        assert!(!nodes.is_empty());
        assert!(nodes.iter().all(|n| n.memory.mem_total > 0), "{nodes:?}");
        for (version, path) in [
            (CgroupVersion::V1, "/sys/fs/cgroup/memory/memory.numa_stat"),
            (CgroupVersion::V2, "/sys/fs/cgroup/memory.numa_stat"),
        ] {
            if let Ok(text) = std::fs::read_to_string(path) {
                let stat = NumaStat::parse(&text, version, page_size()).unwrap();
                assert!(stat.nodes.contains_key(&nodes[0].id), "{path}: {stat:?}");
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..256)) {
            let text = String::from_utf8_lossy(&bytes);
            let _ = NumaMeminfo::parse(&text);
            for v in [CgroupVersion::V1, CgroupVersion::V2] {
                let _ = NumaStat::parse(&text, v, u64::MAX);
            }
        }
    }
}
