//! Is a soak run flat? Each figure's median over the last quarter of the run is compared with
//! its median over the first quarter after warm-up (koordlet's metric rings fill up then: 300
//! samples per series, 75 s at a 250 ms collect interval, and its kept cgroup files open).
//! Medians, not maxima: a noisy shared machine and the allocator's batching make single
//! samples jumpy; a leak moves the median.

use std::fmt;

use super::sample::Sample;

/// How much a figure may grow between the first and the last quarter and still be flat.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bound {
    /// Absolute slack, in the figure's unit.
    pub absolute: f64,
    /// Relative slack, as a fraction of the early median.
    pub relative: f64,
}

impl Bound {
    fn allows(&self, early: f64, late: f64) -> bool {
        late <= early + self.absolute + early * self.relative
    }
}

/// The bounds of the soak: RSS and cgroup memory may grow by 8 MiB + 10 %, descriptors by 16,
/// threads by 4, cgroup directories and tasks by 2 % of their early count + 8 (pods being torn
/// down and started when the sample is taken).
pub const BOUNDS: [(Figure, Bound); 10] = [
    (
        Figure::KoordletRss,
        Bound {
            absolute: 8.0 * 1048576.0,
            relative: 0.10,
        },
    ),
    (
        Figure::KoordletCgroupMemory,
        Bound {
            absolute: 8.0 * 1048576.0,
            relative: 0.10,
        },
    ),
    (
        Figure::KoordletFds,
        Bound {
            absolute: 16.0,
            relative: 0.0,
        },
    ),
    (
        Figure::KoordletThreads,
        Bound {
            absolute: 4.0,
            relative: 0.0,
        },
    ),
    (
        Figure::ManagerRss,
        Bound {
            absolute: 8.0 * 1048576.0,
            relative: 0.10,
        },
    ),
    (
        Figure::ManagerCgroupMemory,
        Bound {
            absolute: 8.0 * 1048576.0,
            relative: 0.10,
        },
    ),
    (
        Figure::ManagerFds,
        Bound {
            absolute: 16.0,
            relative: 0.0,
        },
    ),
    (
        Figure::ManagerThreads,
        Bound {
            absolute: 4.0,
            relative: 0.0,
        },
    ),
    (
        Figure::CgroupDirs,
        Bound {
            absolute: 8.0,
            relative: 0.02,
        },
    ),
    (
        Figure::CgroupTasks,
        Bound {
            absolute: 8.0,
            relative: 0.02,
        },
    ),
];

/// One measured figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Figure {
    /// koordlet resident memory, bytes.
    KoordletRss,
    /// What koordlet's own memory cgroup charged (kernel memory included), bytes.
    KoordletCgroupMemory,
    /// koordlet open descriptors.
    KoordletFds,
    /// koordlet threads.
    KoordletThreads,
    /// koord-manager resident memory, bytes.
    ManagerRss,
    /// What koord-manager's own memory cgroup charged, bytes.
    ManagerCgroupMemory,
    /// koord-manager open descriptors.
    ManagerFds,
    /// koord-manager threads.
    ManagerThreads,
    /// Cgroup directories below `kubepods`.
    CgroupDirs,
    /// Tasks in those cgroups.
    CgroupTasks,
}

impl Figure {
    /// The figure's value in one sample.
    pub fn of(self, s: &Sample) -> f64 {
        (match self {
            Figure::KoordletRss => s.koordlet.rss_bytes,
            Figure::KoordletCgroupMemory => s.koordlet.cgroup_bytes,
            Figure::KoordletFds => s.koordlet.open_fds,
            Figure::KoordletThreads => s.koordlet.threads,
            Figure::ManagerRss => s.manager.rss_bytes,
            Figure::ManagerCgroupMemory => s.manager.cgroup_bytes,
            Figure::ManagerFds => s.manager.open_fds,
            Figure::ManagerThreads => s.manager.threads,
            Figure::CgroupDirs => s.cgroup_dirs,
            Figure::CgroupTasks => s.cgroup_tasks,
        }) as f64
    }

    fn is_bytes(self) -> bool {
        matches!(
            self,
            Figure::KoordletRss
                | Figure::KoordletCgroupMemory
                | Figure::ManagerRss
                | Figure::ManagerCgroupMemory
        )
    }
}

impl fmt::Display for Figure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Figure::KoordletRss => "koordlet RSS",
            Figure::KoordletCgroupMemory => "koordlet cgroup memory",
            Figure::KoordletFds => "koordlet open fds",
            Figure::KoordletThreads => "koordlet threads",
            Figure::ManagerRss => "koord-manager RSS",
            Figure::ManagerCgroupMemory => "koord-manager cgroup memory",
            Figure::ManagerFds => "koord-manager open fds",
            Figure::ManagerThreads => "koord-manager threads",
            Figure::CgroupDirs => "cgroup dirs (kubepods)",
            Figure::CgroupTasks => "cgroup tasks (kubepods)",
        })
    }
}

/// One figure's outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Which figure.
    pub figure: Figure,
    /// Median of the first quarter after warm-up.
    pub early: f64,
    /// Median of the last quarter.
    pub late: f64,
    /// The largest sample after warm-up.
    pub peak: f64,
    /// Whether the growth is within its [`Bound`].
    pub flat: bool,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let show = |v: f64| {
            if self.figure.is_bytes() {
                format!("{:.1} MiB", v / 1048576.0)
            } else {
                format!("{v:.0}")
            }
        };
        write!(
            f,
            "{:<26} early {:>10}  late {:>10}  peak {:>10}  {}",
            self.figure.to_string(),
            show(self.early),
            show(self.late),
            show(self.peak),
            if self.flat { "flat" } else { "GROWS" }
        )
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// Judges every figure of a run from `warm_up` seconds on; `None` when there are too few
/// samples (fewer than 8 after warm-up) to tell.
pub fn judge(samples: &[Sample], warm_up: std::time::Duration) -> Option<Vec<Outcome>> {
    let warm = samples.partition_point(|s| s.seconds < warm_up.as_secs_f64());
    let steady = samples.get(warm..)?;
    if steady.len() < 8 {
        return None;
    }
    let quarter = steady.len() / 4;
    let early_samples = &steady[..quarter];
    let late_samples = &steady[steady.len() - quarter..];
    Some(
        BOUNDS
            .iter()
            .map(|(figure, bound)| {
                let early = median(early_samples.iter().map(|s| figure.of(s)).collect());
                let late = median(late_samples.iter().map(|s| figure.of(s)).collect());
                let peak = steady.iter().map(|s| figure.of(s)).fold(0.0, f64::max);
                Outcome {
                    figure: *figure,
                    early,
                    late,
                    peak,
                    flat: bound.allows(early, late),
                }
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soak::sample::ProcessFootprint;

    fn run(rss: impl Fn(usize) -> u64) -> Vec<Sample> {
        (0..40)
            .map(|i| Sample {
                seconds: i as f64,
                koordlet: ProcessFootprint {
                    rss_bytes: rss(i),
                    open_fds: 40,
                    threads: 6,
                    ..Default::default()
                },
                manager: ProcessFootprint {
                    rss_bytes: 30 << 20,
                    open_fds: 20,
                    threads: 3,
                    ..Default::default()
                },
                cgroup_dirs: 500,
                cgroup_tasks: 250,
                pods: 250,
                load1: 1.0,
            })
            .collect()
    }

    #[test]
    fn a_flat_run_with_a_warm_up_is_flat() {
        let outcomes = judge(
            &run(|i| {
                if i < 4 {
                    5 << 20
                } else {
                    (20 << 20) + (i as u64 % 3) * 4096
                }
            }),
            std::time::Duration::from_secs(4),
        )
        .unwrap();
        assert!(outcomes.iter().all(|o| o.flat), "{outcomes:?}");
    }

    #[test]
    fn a_leak_is_not_flat() {
        let outcomes = judge(&run(|i| (20 << 20) + i as u64 * (1 << 20)), Default::default()).unwrap();
        let rss = outcomes.iter().find(|o| o.figure == Figure::KoordletRss).unwrap();
        assert!(!rss.flat, "{rss}");
        assert!(outcomes.iter().filter(|o| !o.flat).count() == 1);
    }

    #[test]
    fn too_few_samples_tell_nothing() {
        assert_eq!(judge(&run(|_| 1)[..12], std::time::Duration::from_secs(5)), None);
    }
}
