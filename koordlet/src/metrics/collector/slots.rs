//! The cgroup files of one followed object (pod, container, host application), kept open
//! between rounds, and the reads of a round: CPU rate, memory, memory per NUMA node.

use koord_api::nodemetric::MemoryCollectPolicy;

use crate::metrics::MetricTime;
use crate::system::{CgroupDir, CgroupFile, CgroupResource, Cgroups, SystemError};

/// One object's files (resolved on first use) and its previous CPU counter.
#[derive(Debug, Default)]
pub(super) struct CgroupSlots {
    cpu: Option<CgroupFile>,
    memory_usage: Option<CgroupFile>,
    memory_stat: Option<CgroupFile>,
    numa_stat: Option<CgroupFile>,
    /// Time and cumulative ns of the last successful CPU read.
    prev_cpu: Option<(MetricTime, u64)>,
}

impl CgroupSlots {
    /// Whether a previous CPU counter is held.
    pub(super) fn has_cpu_counter(&self) -> bool {
        self.prev_cpu.is_some()
    }

    /// The object's CPU rate in cores since its previous reading (`None` on its first reading
    /// or when the counter went backwards).
    pub(super) fn read_cpu(
        &mut self,
        cgroups: &Cgroups,
        dir: &dyn Fn() -> CgroupDir,
        buf: &mut Vec<u8>,
        now: MetricTime,
    ) -> Result<Option<f64>, SystemError> {
        let ns = match read_slot(
            cgroups,
            &mut self.cpu,
            CgroupResource::CpuUsage,
            dir,
            buf,
            CgroupFile::read_u64,
        ) {
            Ok(ns) => ns,
            Err(error) => {
                self.prev_cpu = None;
                return Err(error);
            }
        };
        let rate = self.prev_cpu.and_then(|(t, prev)| {
            let elapsed_ns = (now.as_millis() - t.as_millis()).checked_mul(1_000_000)?;
            (elapsed_ns > 0).then_some(())?;
            Some(ns.checked_sub(prev)? as f64 / elapsed_ns as f64)
        });
        self.prev_cpu = Some((now, ns));
        Ok(rate)
    }

    /// The object's memory under `policy`: usage, minus inactive page cache unless page cache
    /// counts.
    pub(super) fn read_memory(
        &mut self,
        cgroups: &Cgroups,
        dir: &dyn Fn() -> CgroupDir,
        buf: &mut Vec<u8>,
        policy: MemoryCollectPolicy,
    ) -> Result<f64, SystemError> {
        let usage = read_slot(
            cgroups,
            &mut self.memory_usage,
            CgroupResource::MemoryUsage,
            dir,
            buf,
            CgroupFile::read_u64,
        )?;
        if policy == MemoryCollectPolicy::UsageWithPageCache {
            return Ok(usage as f64);
        }
        let stat = read_slot(
            cgroups,
            &mut self.memory_stat,
            CgroupResource::MemoryStat,
            dir,
            buf,
            CgroupFile::read_memory_stat,
        )?;
        Ok(stat.working_set(usage) as f64)
    }

    /// Adds the object's memory on each NUMA node under `policy` (see [`crate::system::numa`])
    /// to `per_node` (indexed like the NUMA nodes of the round, by position in `ids`).
    pub(super) fn add_numa_memory(
        &mut self,
        cgroups: &Cgroups,
        dir: &dyn Fn() -> CgroupDir,
        buf: &mut Vec<u8>,
        policy: MemoryCollectPolicy,
        ids: &[u32],
        per_node: &mut [f64],
    ) -> Result<(), SystemError> {
        let page_size = crate::system::numa::page_size();
        let stat = read_slot(
            cgroups,
            &mut self.numa_stat,
            CgroupResource::MemoryNumaStat,
            dir,
            buf,
            |file, buf| file.read_numa_stat(buf, page_size),
        )?;
        for (id, sum) in ids.iter().zip(per_node.iter_mut()) {
            if let Some(pages) = stat.nodes.get(id) {
                *sum += match policy {
                    MemoryCollectPolicy::UsageWithPageCache => pages.with_page_cache(),
                    _ => pages.without_page_cache(),
                } as f64;
            }
        }
        Ok(())
    }
}

/// Reads the file in `slot`, resolving it in `dir()` first when needed. A file that vanished
/// (its cgroup was removed, e.g. recreated by the runtime) is forgotten, so the next round
/// resolves and probes it again.
fn read_slot<T>(
    cgroups: &Cgroups,
    slot: &mut Option<CgroupFile>,
    resource: CgroupResource,
    dir: &dyn Fn() -> CgroupDir,
    buf: &mut Vec<u8>,
    read: impl Fn(&mut CgroupFile, &mut Vec<u8>) -> Result<T, SystemError>,
) -> Result<T, SystemError> {
    let mut file = match slot.take() {
        Some(file) => file,
        None => cgroups.file(resource, &dir())?,
    };
    let result = read(&mut file, buf);
    if !matches!(result, Err(SystemError::CgroupDirMissing(_))) {
        *slot = Some(file);
    }
    result
}
