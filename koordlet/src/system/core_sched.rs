//! Core scheduling (`prctl(PR_SCHED_CORE)`, Linux 5.14+ with `CONFIG_SCHED_CORE`, on SMT
//! machines): one cookie per pod, so the SMT sibling of a CPU running a task of that pod only
//! runs tasks of the same pod (or idles).
//!
//! The core decides which pods get a cookie; [`CoreScheduler::apply`] makes it so for the
//! threads in each pod's cgroup tree: the first round creates a cookie on one thread (the
//! pod's leader) and shares it to the others; later rounds share it to threads that appeared
//! since (threads a cookied thread starts inherit the cookie; processes the runtime starts in
//! the pod, such as `exec`s, do not). Sharing needs the cookie on the calling thread, so it runs
//! on a short-lived helper thread that pulls the leader's cookie, pushes it to each target and
//! exits (its reference to the cookie goes with it).
//!
//! Where the kernel has no core scheduling the first call says why (`EINVAL`: built without
//! `CONFIG_SCHED_CORE`; `ENODEV`: no SMT), and nothing is attempted after that.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::Path;

use rustix::io::Errno;
use rustix::process::Pid;
use rustix::thread::{
    CoreSchedulingScope, core_scheduling_cookie, create_core_scheduling_cookie, pull_core_scheduling_cookie,
    push_core_scheduling_cookie,
};

use koordlet_core::strategies::cpu_qos::CoreSchedPlan;

use super::{CgroupDir, CgroupResource, CgroupVersion, Cgroups};

/// Why this kernel cannot do core scheduling, `None` when it can.
pub fn unsupported_reason() -> Option<String> {
    match core_scheduling_cookie(rustix::thread::gettid(), CoreSchedulingScope::Thread) {
        Ok(_) => None,
        Err(Errno::INVAL) => {
            Some("kernel built without CONFIG_SCHED_CORE (prctl PR_SCHED_CORE: EINVAL)".into())
        }
        Err(Errno::NODEV) => Some("no SMT on this machine (prctl PR_SCHED_CORE: ENODEV)".into()),
        Err(e) => Some(format!("prctl PR_SCHED_CORE_GET: {e}")),
    }
}

/// The cookie of thread `tid` (0: none), as `PR_SCHED_CORE_GET` reports it (an opaque value:
/// equal for threads that share a cookie).
pub fn cookie_of(tid: i32) -> Result<u64, Errno> {
    let pid = Pid::from_raw(tid).ok_or(Errno::SRCH)?;
    core_scheduling_cookie(pid, CoreSchedulingScope::Thread)
}

/// Every thread in `dir` and below (v1: `tasks` of the cpu controller; v2: `cgroup.threads`).
pub fn cgroup_threads(cgroups: &Cgroups, dir: &CgroupDir) -> Vec<i32> {
    let Ok(base) = cgroups.dir_path(CgroupResource::CpuShares, dir) else {
        return Vec::new();
    };
    let file = match cgroups.version() {
        CgroupVersion::V1 => "tasks",
        CgroupVersion::V2 => "cgroup.threads",
    };
    let mut out = Vec::new();
    let mut stack = vec![base];
    while let Some(d) = stack.pop() {
        if let Ok(text) = fs::read_to_string(d.join(file)) {
            out.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
        }
        if let Ok(entries) = fs::read_dir(&d) {
            stack.extend(entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
        }
    }
    out
}

/// What one [`CoreScheduler::apply`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CoreSchedReport {
    /// Why nothing was done (the kernel cannot), when so.
    pub unsupported: Option<String>,
    /// Cookies created (one per pod that had none).
    pub created: usize,
    /// Threads that were given their pod's cookie.
    pub shared: usize,
    /// Threads that already had it.
    pub unchanged: usize,
    /// prctl failures other than a thread that exited meanwhile (`pod: error`).
    pub errors: Vec<String>,
}

/// Keeps each pod's leader thread between rounds.
#[derive(Debug, Default)]
pub struct CoreScheduler {
    support: Option<Option<String>>,
    leaders: HashMap<String, i32>,
}

impl CoreScheduler {
    /// A scheduler that probes the kernel on its first [`CoreScheduler::apply`].
    pub fn new() -> Self {
        Self::default()
    }

    /// Gives every pod of `plan` one cookie shared by all its threads; pods no longer in the
    /// plan are forgotten (their threads keep the cookie until they exit).
    pub fn apply(&mut self, plan: &CoreSchedPlan, cgroups: &Cgroups) -> CoreSchedReport {
        let support = self.support.get_or_insert_with(unsupported_reason);
        if let Some(reason) = support {
            return CoreSchedReport {
                unsupported: Some(reason.clone()),
                ..CoreSchedReport::default()
            };
        }
        let mut report = CoreSchedReport::default();
        let wanted: HashSet<&str> = plan.pods.iter().map(|p| p.uid.as_str()).collect();
        self.leaders.retain(|uid, _| wanted.contains(uid.as_str()));
        for pod in &plan.pods {
            let Ok(dir) = CgroupDir::new(&pod.cgroup) else {
                continue;
            };
            let threads = cgroup_threads(cgroups, &dir);
            if let Err(e) = self.pod_round(&pod.uid, &threads, &mut report) {
                report.errors.push(format!("{}/{}: {e}", pod.namespace, pod.name));
            }
        }
        report
    }

    fn pod_round(&mut self, uid: &str, threads: &[i32], report: &mut CoreSchedReport) -> Result<(), String> {
        let cookies: Vec<(i32, u64)> = threads
            .iter()
            .filter_map(|&t| cookie_of(t).ok().map(|c| (t, c)))
            .collect();
        let Some(&(first, first_cookie)) = cookies.first() else {
            return Ok(());
        };
        let known = self
            .leaders
            .get(uid)
            .and_then(|l| cookies.iter().find(|(t, c)| t == l && *c != 0))
            .copied();
        let (leader, cookie) = match known {
            Some(found) => found,
            // After a restart the pod may already carry a cookie: adopt it.
            None if first_cookie != 0 => (first, first_cookie),
            None => {
                let pid = Pid::from_raw(first).ok_or("thread id 0")?;
                create_core_scheduling_cookie(pid, CoreSchedulingScope::Thread)
                    .map_err(|e| format!("create cookie on thread {first}: {e}"))?;
                report.created += 1;
                (
                    first,
                    cookie_of(first).map_err(|e| format!("read cookie of {first}: {e}"))?,
                )
            }
        };
        self.leaders.insert(uid.to_owned(), leader);
        let targets: Vec<i32> = cookies
            .iter()
            .filter(|(t, c)| *t != leader && *c != cookie)
            .map(|(t, _)| *t)
            .collect();
        report.unchanged += cookies.len() - targets.len();
        if targets.is_empty() {
            return Ok(());
        }
        let (shared, errors) = share(leader, targets)?;
        report.shared += shared;
        report.errors.extend(errors);
        Ok(())
    }
}

/// Pushes `leader`'s cookie to `targets` from a helper thread; threads that exited meanwhile
/// (`ESRCH`) are not errors.
fn share(leader: i32, targets: Vec<i32>) -> Result<(usize, Vec<String>), String> {
    let leader_pid = Pid::from_raw(leader).ok_or("thread id 0")?;
    std::thread::Builder::new()
        .name("core-sched".into())
        .spawn(move || {
            pull_core_scheduling_cookie(leader_pid, CoreSchedulingScope::Thread)
                .map_err(|e| format!("take the cookie of thread {leader}: {e}"))?;
            let (mut shared, mut errors) = (0, Vec::new());
            for t in targets {
                let Some(pid) = Pid::from_raw(t) else { continue };
                match push_core_scheduling_cookie(pid, CoreSchedulingScope::Thread) {
                    Ok(()) => shared += 1,
                    Err(Errno::SRCH) => {}
                    Err(e) => errors.push(format!("share cookie to thread {t}: {e}")),
                }
            }
            Ok((shared, errors))
        })
        .map_err(|e| format!("start the core-sched helper thread: {e}"))?
        .join()
        .map_err(|_| "the core-sched helper thread panicked".to_string())?
}

/// Whether `/sys/devices/system/cpu/smt/active` (below `sys`) says SMT is on.
pub fn smt_active(sys: &Path) -> bool {
    fs::read_to_string(sys.join("devices/system/cpu/smt/active")).is_ok_and(|s| s.trim() == "1")
}
