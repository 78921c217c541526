//! The allocation step: who asks for CPUs of its own this round, what of the previous table
//! is kept, what is allocated anew, what cannot be done.

use std::collections::BTreeMap;

use super::{Allocation, CpusetPolicy, CpusetPolicyInput, PolicyPod, Problem, shared_after, take_packed};
use crate::strategies::cpuset::CpuList;

/// A container that asks for CPUs of its own.
#[derive(Debug, Clone)]
pub(super) struct Request<'a> {
    pod: &'a PolicyPod,
    container: &'a str,
    policy: CpusetPolicy,
    count: usize,
}

impl Request<'_> {
    fn key(&self) -> (String, String) {
        (self.pod.uid.clone(), self.container.to_owned())
    }

    fn allocation(&self, cpus: CpuList) -> Allocation {
        Allocation {
            pod_uid: self.pod.uid.clone(),
            namespace: self.pod.namespace.clone(),
            name: self.pod.name.clone(),
            container: self.container.to_owned(),
            policy: self.policy,
            cpus,
        }
    }
}

pub(super) fn pod_name(p: &PolicyPod) -> String {
    format!("{}/{}", p.namespace, p.name)
}

fn problem(p: &PolicyPod, container: Option<&str>, reason: String) -> Problem {
    Problem {
        pod: pod_name(p),
        uid: p.uid.clone(),
        container: container.map(str::to_owned),
        reason,
    }
}

/// Whole CPUs of a CPU limit, if it is a positive whole number.
pub(super) fn whole_cpus(limit_milli: Option<i64>) -> Result<usize, String> {
    match limit_milli {
        Some(m) if m > 0 && m % 1000 == 0 => usize::try_from(m / 1000).map_err(|e| e.to_string()),
        Some(m) => Err(format!(
            "CPU limit {m}m is not a whole number of CPUs: the container stays in the shared pool"
        )),
        None => Err("no CPU limit: the container stays in the shared pool".into()),
    }
}

/// The requests of this round, with the problems of pods that cannot ask.
fn requests<'a>(input: &CpusetPolicyInput<'a>, problems: &mut Vec<Problem>) -> Vec<Request<'a>> {
    let mut out = Vec::new();
    for p in input.pods {
        let policy = match &p.policy {
            Ok(Some(policy)) => *policy,
            Ok(None) => continue,
            Err(e) => {
                // Keep what the pod held: a typo must not unpin a running service.
                problems.push(problem(p, None, format!("{e}; its CPUs are left as they were")));
                for a in input.state.allocations.iter().filter(|a| a.pod_uid == p.uid) {
                    if let Some(c) = p.containers.iter().find(|c| c.name == a.container) {
                        out.push(Request {
                            pod: p,
                            container: &c.name,
                            policy: a.policy,
                            count: a.cpus.len(),
                        });
                    }
                }
                continue;
            }
        };
        if policy == CpusetPolicy::None {
            continue;
        }
        if p.bound.is_some() {
            problems.push(problem(
                p,
                None,
                format!("policy {policy} ignored: the scheduler bound the pod to CPUs"),
            ));
            continue;
        }
        if p.be {
            problems.push(problem(
                p,
                None,
                format!("policy {policy} ignored: BE pods run in the BE pool"),
            ));
            continue;
        }
        for c in &p.containers {
            match whole_cpus(c.cpu_limit_milli) {
                Ok(count) => out.push(Request {
                    pod: p,
                    container: &c.name,
                    policy,
                    count,
                }),
                Err(reason) => problems.push(problem(p, Some(&c.name), reason)),
            }
        }
    }
    out
}

/// What the allocation step leaves: accepted allocations and the CPUs they hold.
#[derive(Debug, Default)]
pub(super) struct Table {
    pub(super) accepted: BTreeMap<(String, String), Allocation>,
    pub(super) exclusive: CpuList,
    pub(super) share: CpuList,
}

impl Table {
    fn add(&mut self, a: Allocation) {
        match a.policy {
            CpusetPolicy::Exclusive => self.exclusive = self.exclusive.union(&a.cpus),
            _ => self.share = self.share.union(&a.cpus),
        }
        self.accepted.insert(a.key(), a);
    }
}

/// The allocation step: keeps what can be kept, allocates the rest, reports the impossible.
pub(super) fn allocate_all(
    input: &CpusetPolicyInput<'_>,
    online: &CpuList,
    lse: &CpuList,
    lsr: &CpuList,
    problems: &mut Vec<Problem>,
) -> Table {
    let requests = requests(input, problems);
    let previous: BTreeMap<(String, String), &Allocation> =
        input.state.allocations.iter().map(|a| (a.key(), a)).collect();
    let usable = online.difference(input.reserved).difference(lse);
    let mut table = Table::default();
    let mut fresh = Vec::new();
    // Keeps: exclusive first (they must not overlap anything), then share.
    for policy in [CpusetPolicy::Exclusive, CpusetPolicy::Share] {
        for r in requests.iter().filter(|r| r.policy == policy) {
            let kept = previous
                .get(&r.key())
                .map(|a| &a.cpus)
                .filter(|cpus| cpus.len() == r.count && cpus.is_subset(&usable))
                .filter(|cpus| match policy {
                    CpusetPolicy::Exclusive => {
                        cpus.intersection(lsr).is_empty()
                            && cpus.intersection(&table.exclusive).is_empty()
                            && cpus.intersection(&table.share).is_empty()
                            && !shared_after(online, lse, lsr, &table.exclusive.union(cpus)).is_empty()
                    }
                    _ => cpus.intersection(&table.exclusive).is_empty(),
                });
            match kept {
                Some(cpus) => table.add(r.allocation(cpus.clone())),
                None => fresh.push(r),
            }
        }
    }
    // A kept share allocation may sit on CPUs a kept exclusive one now needs: both were checked
    // in that order above, so only fresh requests remain. Exclusive first, in name order.
    fresh.sort_by_key(|r| {
        (
            r.policy != CpusetPolicy::Exclusive,
            pod_name(r.pod),
            r.container.to_owned(),
        )
    });
    for r in fresh {
        match r.policy {
            CpusetPolicy::Exclusive => {
                let free = usable
                    .difference(lsr)
                    .difference(&table.exclusive)
                    .difference(&table.share);
                let chosen = take_packed(input.topology, &free, r.count)
                    .filter(|cpus| !shared_after(online, lse, lsr, &table.exclusive.union(cpus)).is_empty());
                match chosen {
                    Some(cpus) => table.add(r.allocation(cpus)),
                    None => problems.push(problem(
                        r.pod,
                        Some(r.container),
                        format!(
                            "cannot give {} exclusive CPUs: {} free (at least one CPU stays in the shared pool); \
                             the container stays in the shared pool",
                            r.count,
                            free.len()
                        ),
                    )),
                }
            }
            _ => {
                let candidates = usable.difference(&table.exclusive);
                let preferred = candidates.difference(lsr).difference(&table.share);
                let chosen = if preferred.len() >= r.count {
                    take_packed(input.topology, &preferred, r.count)
                } else {
                    take_packed(
                        input.topology,
                        &candidates.difference(&preferred),
                        r.count - preferred.len(),
                    )
                    .map(|more| more.union(&preferred))
                };
                match chosen {
                    Some(cpus) => table.add(r.allocation(cpus)),
                    None => problems.push(problem(
                        r.pod,
                        Some(r.container),
                        format!(
                            "cannot bind to {} CPUs: only {} are not held exclusively",
                            r.count,
                            candidates.len()
                        ),
                    )),
                }
            }
        }
    }
    table
}
