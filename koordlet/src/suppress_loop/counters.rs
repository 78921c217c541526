//! Kept-open counter files read with `pread` at offset 0 into the caller's buffer.
//!
//! Every file here is a seq_file (procfs, kernfs): a read at offset 0 regenerates the content,
//! so one descriptor serves every tick. Parsing works on the bytes in place; nothing allocates.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use koordlet_core::strategies::CFS_PERIOD_US;

use super::parse_error;
use crate::system::SystemError;

/// How a counter file is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CounterKind {
    /// `/proc/stat`: busy ticks (user + nice + system + irq + softirq) of the first line.
    ProcStat,
    /// One unsigned integer in ns (`cpuacct.usage`).
    CgroupNs,
    /// `cpu.stat` of cgroup v2: `usage_usec`, returned in ns.
    CpuStatUsec,
    /// One signed integer (`cpu.cfs_quota_us`).
    Int,
    /// `cpu.max`: `max <period>` (-1) or `<quota> <period>`, returned per 100 ms period.
    CpuMax,
    /// A CPU list (`cpuset.cpus`): only its size is read.
    CpuList,
}

/// One kept-open counter file.
#[derive(Debug)]
pub(crate) struct CounterFile {
    path: PathBuf,
    kind: CounterKind,
    file: Option<File>,
}

impl CounterFile {
    pub(crate) fn new(path: PathBuf, kind: CounterKind) -> Self {
        Self {
            path,
            kind,
            file: None,
        }
    }

    pub(crate) fn kind(&self) -> CounterKind {
        self.kind
    }

    fn read_text<'b>(&mut self, buf: &'b mut [u8]) -> Result<&'b str, SystemError> {
        let io = |path: &PathBuf, source| SystemError::Io {
            path: path.clone(),
            source,
        };
        let file = match &self.file {
            Some(f) => f,
            None => self
                .file
                .insert(File::open(&self.path).map_err(|e| io(&self.path, e))?),
        };
        match file.read_at(buf, 0) {
            Ok(n) => {
                std::str::from_utf8(&buf[..n]).map_err(|_| parse_error(&self.path, "counter", "not ASCII"))
            }
            Err(e) => {
                // A removed cgroup leaves a dead descriptor: reopen next time.
                self.file = None;
                Err(io(&self.path, e))
            }
        }
    }

    /// The counter (ns for usage counters, ticks for `/proc/stat`).
    pub(crate) fn read(&mut self, buf: &mut [u8]) -> Result<u64, SystemError> {
        let kind = self.kind;
        let text = self.read_text(buf)?;
        let value = match kind {
            CounterKind::ProcStat => proc_stat_busy(text),
            CounterKind::CgroupNs => text.trim().parse().ok(),
            CounterKind::CpuStatUsec => text
                .lines()
                .find_map(|l| l.strip_prefix("usage_usec "))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(|us| us.saturating_mul(1000)),
            CounterKind::Int | CounterKind::CpuMax => text.trim().parse().ok(),
            CounterKind::CpuList => cpu_list_len(text).map(|n| n as u64),
        };
        value.ok_or_else(|| parse_error(&self.path, "counter", "unexpected content"))
    }

    /// A signed value (`cpu.cfs_quota_us`, `cpu.max` in v1 units).
    pub(crate) fn read_signed(&mut self, buf: &mut [u8]) -> Result<i64, SystemError> {
        let kind = self.kind;
        let text = self.read_text(buf)?;
        let value = match kind {
            CounterKind::CpuMax => cpu_max_quota(text),
            _ => text.trim().parse().ok(),
        };
        value.ok_or_else(|| parse_error(&self.path, "quota", "unexpected content"))
    }
}

/// Busy ticks of the aggregate `cpu` line (idle, iowait and steal excluded, as upstream).
pub(crate) fn proc_stat_busy(text: &str) -> Option<u64> {
    let line = text.lines().next()?;
    let mut fields = line.split_ascii_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    let mut busy = 0u64;
    for (i, f) in fields.take(7).enumerate() {
        let v: u64 = f.parse().ok()?;
        // user nice system idle iowait irq softirq
        if !matches!(i, 3 | 4) {
            busy = busy.saturating_add(v);
        }
    }
    Some(busy)
}

/// Number of CPUs in a kernel CPU list (`0-3,8,10-11`), without allocating; empty text is 0.
pub(crate) fn cpu_list_len(text: &str) -> Option<usize> {
    let text = text.trim();
    if text.is_empty() {
        return Some(0);
    }
    let mut n = 0usize;
    for part in text.split(',') {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse::<u32>().ok()?, b.trim().parse::<u32>().ok()?),
            None => {
                let v = part.trim().parse::<u32>().ok()?;
                (v, v)
            }
        };
        if b < a {
            return None;
        }
        n = n.saturating_add((b - a) as usize + 1);
    }
    Some(n)
}

/// `cpu.max` as a v1 quota per [`CFS_PERIOD_US`] (-1 for `max`).
pub(crate) fn cpu_max_quota(text: &str) -> Option<i64> {
    let mut fields = text.split_ascii_whitespace();
    let quota = fields.next()?;
    let period: i64 = fields.next().map_or(Some(CFS_PERIOD_US), |p| p.parse().ok())?;
    if quota == "max" {
        return Some(-1);
    }
    let quota: i64 = quota.parse().ok()?;
    if period <= 0 {
        return None;
    }
    Some(quota.saturating_mul(CFS_PERIOD_US) / period)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_first_line_busy_ticks() {
        let text = "cpu  10 2 30 1000 50 6 7 8 0 0\ncpu0 1 1 1 1 1 1 1 1 0 0\nintr 1 2 3\n";
        assert_eq!(proc_stat_busy(text), Some(10 + 2 + 30 + 6 + 7));
        assert_eq!(proc_stat_busy("cpu0 1 2 3 4 5 6 7\n"), None);
        assert_eq!(proc_stat_busy("cpu  1 x 3 4 5 6 7\n"), None);
        assert_eq!(proc_stat_busy(""), None);
    }

    #[test]
    fn cpu_max_in_v1_units() {
        assert_eq!(cpu_max_quota("max 100000\n"), Some(-1));
        assert_eq!(cpu_max_quota("50000 100000\n"), Some(50_000));
        assert_eq!(cpu_max_quota("5000 10000\n"), Some(50_000));
        assert_eq!(cpu_max_quota("5000 0\n"), None);
        assert_eq!(cpu_max_quota("garbage"), None);
    }

    #[test]
    fn cpu_list_sizes() {
        assert_eq!(cpu_list_len("0-3,8,10-11\n"), Some(7));
        assert_eq!(cpu_list_len("\n"), Some(0));
        assert_eq!(cpu_list_len("1"), Some(1));
        assert_eq!(cpu_list_len("3-1"), None);
        assert_eq!(cpu_list_len("x"), None);
    }

    #[test]
    fn kept_open_files_are_reread_from_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cpu.stat");
        std::fs::write(&path, "usage_usec 1500\nuser_usec 1000\n").unwrap();
        let mut c = CounterFile::new(path.clone(), CounterKind::CpuStatUsec);
        let mut buf = [0u8; 512];
        assert_eq!(c.read(&mut buf).unwrap(), 1_500_000);
        // Same inode, new content (as the kernel regenerates it).
        std::fs::write(&path, "usage_usec 2500\nuser_usec 1000\n").unwrap();
        assert_eq!(c.read(&mut buf).unwrap(), 2_500_000);
        let mut bad = CounterFile::new(dir.path().join("missing"), CounterKind::CgroupNs);
        assert!(bad.read(&mut buf).is_err());
        std::fs::write(&path, "garbage").unwrap();
        assert!(c.read(&mut buf).is_err());
    }
}
