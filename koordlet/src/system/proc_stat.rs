//! `/proc/stat` CPU tick counters and the node CPU usage computed from two readings.

use super::ParseError;

/// USER_HZ: the unit of `/proc/stat` ticks. It is 100 on every Linux architecture koordlet runs
/// on (the kernel exports a fixed USER_HZ regardless of CONFIG_HZ); `getconf CLK_TCK` prints it.
pub const USER_HZ: u64 = 100;

/// Cumulative ticks of one `cpu` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuTicks {
    /// Normal user time.
    pub user: u64,
    /// Niced user time.
    pub nice: u64,
    /// Kernel time.
    pub system: u64,
    /// Idle.
    pub idle: u64,
    /// Waiting for I/O (counted as idle).
    pub iowait: u64,
    /// Hard interrupts.
    pub irq: u64,
    /// Soft interrupts.
    pub softirq: u64,
    /// Stolen by the hypervisor (not ours, not counted as busy).
    pub steal: u64,
}

impl CpuTicks {
    /// Busy ticks as upstream counts them: user + nice + system + irq + softirq (idle, iowait
    /// and steal excluded; guest time is already inside user).
    pub fn busy(&self) -> u64 {
        self.user
            .saturating_add(self.nice)
            .saturating_add(self.system)
            .saturating_add(self.irq)
            .saturating_add(self.softirq)
    }
}

/// The parsed CPU part of `/proc/stat`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProcStat {
    /// The aggregate `cpu` line.
    pub total: CpuTicks,
    /// `cpuN` lines, in file order.
    pub per_cpu: Vec<(u32, CpuTicks)>,
}

impl ProcStat {
    /// Parses `/proc/stat`. The aggregate `cpu` line is required; other lines are ignored.
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        let mut total = None;
        let mut per_cpu = Vec::new();
        for line in text.lines() {
            let mut fields = line.split_whitespace();
            let Some(label) = fields.next() else { continue };
            let Some(suffix) = label.strip_prefix("cpu") else {
                continue;
            };
            let ticks = parse_ticks(fields)?;
            if suffix.is_empty() {
                total = Some(ticks);
            } else if let Ok(cpu) = suffix.parse::<u32>() {
                per_cpu.push((cpu, ticks));
            }
        }
        let total = total.ok_or_else(|| ParseError::new("/proc/stat", "no aggregate cpu line"))?;
        Ok(Self { total, per_cpu })
    }
}

fn parse_ticks<'a>(fields: impl Iterator<Item = &'a str>) -> Result<CpuTicks, ParseError> {
    let mut values = [0u64; 8];
    let mut n = 0;
    for (slot, field) in values.iter_mut().zip(fields) {
        *slot = field
            .parse::<u64>()
            .map_err(|e| ParseError::new("/proc/stat", format!("{field:?}: {e}")))?;
        n += 1;
    }
    if n < 4 {
        return Err(ParseError::new(
            "/proc/stat",
            "cpu line has fewer than 4 counters",
        ));
    }
    let [user, nice, system, idle, iowait, irq, softirq, steal] = values;
    Ok(CpuTicks {
        user,
        nice,
        system,
        idle,
        iowait,
        irq,
        softirq,
        steal,
    })
}

impl ProcStat {
    /// Reads and parses `<proc>/stat`.
    pub fn read(roots: &super::SystemRoots) -> Result<Self, super::SystemError> {
        let path = roots.proc_file("stat");
        let text = super::read_text(&path)?;
        Self::parse(&text).map_err(|e| super::SystemError::parse(path, e))
    }
}

/// Cores in use between two readings taken `elapsed_secs` apart: `Δbusy / (elapsed × hz)`.
/// `None` when no time elapsed or the counters went backwards (e.g. a CPU went offline).
pub fn cpu_usage_cores(
    earlier: &CpuTicks,
    later: &CpuTicks,
    elapsed_secs: f64,
    ticks_per_sec: u64,
) -> Option<f64> {
    let busy = later.busy().checked_sub(earlier.busy())?;
    let ticks = elapsed_secs * ticks_per_sec as f64;
    (ticks > 0.0 && ticks.is_finite()).then(|| busy as f64 / ticks)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURE: &str = "cpu  100 10 50 1000 5 3 2 7 0 0\ncpu0 50 5 25 500 2 1 1 3 0 0\ncpu1 50 5 25 500 3 2 1 4 0 0\nintr 1 2 3\nctxt 99\n";

    #[test]
    fn parses_aggregate_and_per_cpu() {
        let stat = ProcStat::parse(FIXTURE).unwrap();
        assert_eq!(stat.total.busy(), 100 + 10 + 50 + 3 + 2);
        assert_eq!(stat.total.steal, 7);
        assert_eq!(stat.per_cpu.len(), 2);
        assert_eq!(stat.per_cpu[1].0, 1);
        // Old kernels: 4 counters.
        assert_eq!(ProcStat::parse("cpu 1 2 3 4\n").unwrap().total.busy(), 6);
        assert!(ProcStat::parse("cpu 1 2\n").is_err());
        assert!(ProcStat::parse("cpu a b c d\n").is_err());
        assert!(ProcStat::parse("intr 1\n").is_err());
    }

    #[test]
    fn usage_from_two_readings() {
        let a = CpuTicks {
            user: 100,
            ..Default::default()
        };
        let b = CpuTicks {
            user: 250,
            system: 50,
            ..Default::default()
        };
        // 200 busy ticks over 1 s at 100 Hz = 2 cores.
        assert_eq!(cpu_usage_cores(&a, &b, 1.0, USER_HZ), Some(2.0));
        assert_eq!(cpu_usage_cores(&b, &a, 1.0, USER_HZ), None);
        assert_eq!(cpu_usage_cores(&a, &b, 0.0, USER_HZ), None);
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..256)) {
            let _ = ProcStat::parse(&String::from_utf8_lossy(&bytes));
        }
    }
}
