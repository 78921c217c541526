//! The order in which a plan's writes reach the kernel. Pure: takes the writes and the values
//! the kernel holds now, returns steps.
//!
//! Rules:
//! - Loosening writes (a larger limit, a wider cpuset, -1 "no limit") go first, parents before
//!   children (top-down); tightening writes go second, children before parents (bottom-up).
//!   A parent is therefore never tighter than a child at any moment, which v1 enforces for CFS
//!   quota and cpuset (EINVAL otherwise).
//! - A cpuset that moves (neither a subset nor a superset of the current one) is first widened
//!   to the union of old and new in the top-down pass, then set to its final value in the
//!   bottom-up pass.
//! - Within one cgroup the kernel requires `burst <= quota`: when raising, the quota goes
//!   before the burst; when lowering, the burst goes first. A quota lowered below the burst the
//!   kernel holds, with no burst write in the plan, gets a burst write clamped to the new quota
//!   before it (otherwise the quota write would fail every round).

use std::cmp::Ordering;

use crate::system::{CgroupResource, CgroupValue, Domain};

use super::CgroupWrite;

/// One write in execution order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The write to do.
    pub write: CgroupWrite,
    /// True for a temporary value (a cpuset union, a burst clamp) that a later step or the next
    /// round replaces; it is not cached as the strategy's value.
    pub intermediate: bool,
}

/// Compares a new value to the current one: `Greater` loosens, `Less` tightens, `Equal` for
/// equal values, `None` when they are not comparable (a moving cpuset) or the current value is
/// unknown.
fn compare(resource: CgroupResource, new: &CgroupValue, current: Option<&CgroupValue>) -> Option<Ordering> {
    let current = current?;
    match (new, current) {
        (CgroupValue::Int(n), CgroupValue::Int(c)) => {
            // -1 means "no limit" wherever the domain allows it: the loosest value there is.
            let unlimited_is_max = matches!(resource.spec().domain, Domain::Int { unlimited: true, .. });
            let key = |v: i64| {
                if unlimited_is_max && v == -1 {
                    i128::MAX
                } else {
                    i128::from(v)
                }
            };
            Some(key(*n).cmp(&key(*c)))
        }
        (CgroupValue::Cpus(n), CgroupValue::Cpus(c)) => {
            if n == c {
                Some(Ordering::Equal)
            } else if c.is_subset(n) {
                Some(Ordering::Greater)
            } else if n.is_subset(c) {
                Some(Ordering::Less)
            } else {
                None
            }
        }
        _ => None,
    }
}

/// Rank of a resource inside one cgroup in the loosening pass (period, quota, then burst);
/// the tightening pass uses the reverse.
fn rank(resource: CgroupResource) -> u8 {
    match resource {
        CgroupResource::CpuCfsPeriod => 0,
        CgroupResource::CpuCfsQuota => 1,
        CgroupResource::CpuCfsBurst => 2,
        _ => 3,
    }
}

/// Orders `writes` (each paired with the value the kernel holds now, if known).
pub fn order_writes(writes: Vec<(CgroupWrite, Option<CgroupValue>)>) -> Vec<Step> {
    let mut loosen: Vec<Step> = Vec::new();
    let mut tighten: Vec<Step> = Vec::new();

    for (write, current) in writes {
        match compare(write.resource, &write.value, current.as_ref()) {
            Some(Ordering::Less) => tighten.push(Step {
                write,
                intermediate: false,
            }),
            None => {
                if let (CgroupValue::Cpus(new), Some(CgroupValue::Cpus(old))) =
                    (&write.value, current.as_ref())
                {
                    let mut widened = write.clone();
                    widened.value = CgroupValue::Cpus(new.union(old));
                    loosen.push(Step {
                        write: widened,
                        intermediate: true,
                    });
                    tighten.push(Step {
                        write,
                        intermediate: false,
                    });
                } else {
                    // Unknown current value: treat as loosening (the cgroup may be new).
                    loosen.push(Step {
                        write,
                        intermediate: false,
                    });
                }
            }
            Some(_) => loosen.push(Step {
                write,
                intermediate: false,
            }),
        }
    }

    loosen.sort_by(|a, b| {
        (a.write.cgroup.depth(), &a.write.cgroup, rank(a.write.resource)).cmp(&(
            b.write.cgroup.depth(),
            &b.write.cgroup,
            rank(b.write.resource),
        ))
    });
    tighten.sort_by(|a, b| {
        (
            std::cmp::Reverse(a.write.cgroup.depth()),
            &a.write.cgroup,
            std::cmp::Reverse(rank(a.write.resource)),
        )
            .cmp(&(
                std::cmp::Reverse(b.write.cgroup.depth()),
                &b.write.cgroup,
                std::cmp::Reverse(rank(b.write.resource)),
            ))
    });
    loosen.extend(tighten);
    loosen
}

/// The burst clamp rule: for each quota write whose new (finite) value is below the burst the
/// kernel holds, and with no burst write for that cgroup in the plan, a burst write of the new
/// quota. `current_burst` looks the kernel's burst up.
pub fn burst_clamps(
    writes: &[(CgroupWrite, Option<CgroupValue>)],
    mut current_burst: impl FnMut(&CgroupWrite) -> Option<i64>,
) -> Vec<CgroupWrite> {
    let mut out = Vec::new();
    for (write, _) in writes {
        let CgroupValue::Int(quota) = write.value else {
            continue;
        };
        if write.resource != CgroupResource::CpuCfsQuota || quota == -1 {
            continue;
        }
        let planned = writes
            .iter()
            .any(|(w, _)| w.resource == CgroupResource::CpuCfsBurst && w.cgroup == write.cgroup);
        if planned {
            continue;
        }
        if current_burst(write).is_some_and(|burst| burst > quota) {
            out.push(CgroupWrite {
                cgroup: write.cgroup.clone(),
                resource: CgroupResource::CpuCfsBurst,
                value: CgroupValue::Int(quota),
                strategy: format!("{} (burst clamp)", write.strategy).into(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::system::{CgroupDir, CpuSet};

    fn w(dir: &str, resource: CgroupResource, value: CgroupValue) -> CgroupWrite {
        CgroupWrite {
            cgroup: CgroupDir::new(dir).unwrap(),
            resource,
            value,
            strategy: "test".into(),
        }
    }

    fn cpus(s: &str) -> CgroupValue {
        CgroupValue::Cpus(CpuSet::parse(s).unwrap())
    }

    fn names(steps: &[Step]) -> Vec<String> {
        steps
            .iter()
            .map(|s| format!("{}:{}={}", s.write.cgroup, s.write.resource, s.write.value))
            .collect()
    }

    #[test]
    fn raising_quota_goes_before_burst_and_lowering_after() {
        use CgroupResource::{CpuCfsBurst as B, CpuCfsQuota as Q};
        let up = order_writes(vec![
            (
                w("p", B, CgroupValue::Int(150_000)),
                Some(CgroupValue::Int(50_000)),
            ),
            (
                w("p", Q, CgroupValue::Int(200_000)),
                Some(CgroupValue::Int(100_000)),
            ),
        ]);
        assert_eq!(
            names(&up),
            ["p:cpu.cfs_quota_us=200000", "p:cpu.cfs_burst_us=150000"]
        );
        let down = order_writes(vec![
            (
                w("p", Q, CgroupValue::Int(50_000)),
                Some(CgroupValue::Int(200_000)),
            ),
            (
                w("p", B, CgroupValue::Int(20_000)),
                Some(CgroupValue::Int(150_000)),
            ),
        ]);
        assert_eq!(
            names(&down),
            ["p:cpu.cfs_burst_us=20000", "p:cpu.cfs_quota_us=50000"]
        );
    }

    #[test]
    fn limits_loosen_top_down_and_tighten_bottom_up() {
        use CgroupResource::CpuCfsQuota as Q;
        let up = order_writes(vec![
            (
                w("k/be/pod/c", Q, CgroupValue::Int(-1)),
                Some(CgroupValue::Int(100_000)),
            ),
            (
                w("k/be", Q, CgroupValue::Int(400_000)),
                Some(CgroupValue::Int(200_000)),
            ),
            (
                w("k/be/pod", Q, CgroupValue::Int(300_000)),
                Some(CgroupValue::Int(100_000)),
            ),
        ]);
        assert_eq!(
            names(&up),
            [
                "k/be:cpu.cfs_quota_us=400000",
                "k/be/pod:cpu.cfs_quota_us=300000",
                "k/be/pod/c:cpu.cfs_quota_us=-1"
            ]
        );
        let down = order_writes(vec![
            (
                w("k/be", Q, CgroupValue::Int(100_000)),
                Some(CgroupValue::Int(-1)),
            ),
            (
                w("k/be/pod/c", Q, CgroupValue::Int(50_000)),
                Some(CgroupValue::Int(100_000)),
            ),
            (
                w("k/be/pod", Q, CgroupValue::Int(100_000)),
                Some(CgroupValue::Int(300_000)),
            ),
        ]);
        assert_eq!(
            names(&down),
            [
                "k/be/pod/c:cpu.cfs_quota_us=50000",
                "k/be/pod:cpu.cfs_quota_us=100000",
                "k/be:cpu.cfs_quota_us=100000"
            ]
        );
    }

    #[test]
    fn moving_cpusets_widen_parents_then_narrow_children() {
        use CgroupResource::CpusetCpus as C;
        let steps = order_writes(vec![
            (w("be/pod", C, cpus("4-5")), Some(cpus("0-1"))),
            (w("be", C, cpus("4-7")), Some(cpus("0-3"))),
        ]);
        assert_eq!(
            names(&steps),
            [
                "be:cpuset.cpus=0-7",
                "be/pod:cpuset.cpus=0-1,4-5",
                "be/pod:cpuset.cpus=4-5",
                "be:cpuset.cpus=4-7"
            ]
        );
        assert_eq!(steps.iter().filter(|s| s.intermediate).count(), 2);
    }

    #[test]
    fn lone_quota_below_current_burst_gets_a_clamp() {
        let plan = vec![(
            w("p", CgroupResource::CpuCfsQuota, CgroupValue::Int(50_000)),
            Some(CgroupValue::Int(200_000)),
        )];
        let clamps = burst_clamps(&plan, |_| Some(80_000));
        assert_eq!(clamps.len(), 1);
        assert_eq!(clamps[0].value, CgroupValue::Int(50_000));
        assert!(burst_clamps(&plan, |_| Some(10_000)).is_empty());
        let unlimited = vec![(w("p", CgroupResource::CpuCfsQuota, CgroupValue::Int(-1)), None)];
        assert!(burst_clamps(&unlimited, |_| Some(80_000)).is_empty());
    }
}
