//! Tier 3: core-scheduling cookies on the real kernel. Where the kernel cannot (built without
//! `CONFIG_SCHED_CORE`, or no SMT), the scheduler must say so cleanly and touch nothing; where
//! it can, every thread of a pod ends with the same cookie, a different one per pod, and a
//! process that joins the pod later gets the pod's cookie on the next round.
#![allow(clippy::expect_used, clippy::unwrap_used)] // test code: a panic is the failure report

use std::path::Path;

use koord_test_support::CgroupV1Tree;
use koordlet::system::core_sched::{
    CoreScheduler, cgroup_threads, cookie_of, smt_active, unsupported_reason,
};
use koordlet::system::{CgroupDir, Cgroups, SystemRoots};
use koordlet_core::strategies::cpu_qos::{CookiePod, CoreSchedPlan};

fn setup() -> Option<(CgroupV1Tree, Cgroups)> {
    let tree = CgroupV1Tree::or_skip(&["cpu"])?;
    match Cgroups::detect(&SystemRoots::default()) {
        Ok(c) => Some((tree, c)),
        Err(e) => {
            println!("skipped: cgroup layout not detected: {e}");
            None
        }
    }
}

fn plan(tree: &CgroupV1Tree, pods: &[&str]) -> CoreSchedPlan {
    CoreSchedPlan {
        pods: pods
            .iter()
            .map(|p| CookiePod {
                namespace: "ns".into(),
                name: (*p).into(),
                uid: format!("uid-{p}"),
                cgroup: tree.rel(p),
            })
            .collect(),
    }
}

#[test]
fn core_sched_reports_an_unsupported_kernel_and_touches_nothing() {
    let Some((mut tree, cgroups)) = setup() else {
        return;
    };
    tree.mkdir("pod-a").unwrap();
    let pid = tree.spawn_burner("pod-a").unwrap();
    let reason = unsupported_reason();
    println!(
        "core scheduling: {} (SMT active: {})",
        reason.as_deref().unwrap_or("supported"),
        smt_active(Path::new("/sys"))
    );
    if !smt_active(Path::new("/sys")) {
        assert!(
            reason.is_some(),
            "core scheduling without SMT cannot be supported"
        );
    }
    let Some(reason) = reason else {
        println!("skipped: this kernel supports core scheduling (the sharing test covers it)");
        return;
    };
    let mut scheduler = CoreScheduler::new();
    let report = scheduler.apply(&plan(&tree, &["pod-a"]), &cgroups);
    assert_eq!(report.unsupported.as_deref(), Some(reason.as_str()));
    assert_eq!((report.created, report.shared), (0, 0));
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    // The reading side reports the same refusal instead of a made-up cookie.
    assert!(cookie_of(pid as i32).is_err());
    // The pod's threads are found all the same (what a supporting kernel would get cookies on).
    let dir = CgroupDir::new(tree.rel("pod-a")).unwrap();
    assert_eq!(cgroup_threads(&cgroups, &dir), vec![pid as i32]);
}

#[test]
fn core_sched_gives_every_thread_of_a_pod_one_cookie() {
    if let Some(reason) = unsupported_reason() {
        println!("skipped: {reason}");
        return;
    }
    let Some((mut tree, cgroups)) = setup() else {
        return;
    };
    for d in ["pod-a", "pod-a/c1", "pod-a/c2", "pod-b", "outside"] {
        tree.mkdir(d).unwrap();
    }
    let a1 = tree.spawn_burner("pod-a/c1").unwrap() as i32;
    let a2 = tree.spawn_burner("pod-a/c2").unwrap() as i32;
    let b1 = tree.spawn_burner("pod-b").unwrap() as i32;
    let out = tree.spawn_burner("outside").unwrap() as i32;
    let mut scheduler = CoreScheduler::new();
    let p = plan(&tree, &["pod-a", "pod-b"]);
    let report = scheduler.apply(&p, &cgroups);
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(report.created, 2);
    let (ca1, ca2, cb1) = (
        cookie_of(a1).unwrap(),
        cookie_of(a2).unwrap(),
        cookie_of(b1).unwrap(),
    );
    assert!(ca1 != 0 && ca1 == ca2, "pod-a threads: {ca1:#x} {ca2:#x}");
    assert!(cb1 != 0 && cb1 != ca1, "pod-b has its own cookie");
    assert_eq!(
        cookie_of(out).unwrap(),
        0,
        "a task outside the pods keeps no cookie"
    );
    // A process the runtime starts in the pod later gets the pod's cookie on the next round.
    let a3 = tree.spawn_burner("pod-a/c1").unwrap() as i32;
    assert_eq!(cookie_of(a3).unwrap(), 0);
    let report = scheduler.apply(&p, &cgroups);
    assert_eq!((report.created, report.shared), (0, 1), "{report:?}");
    assert_eq!(cookie_of(a3).unwrap(), ca1);
    println!("core scheduling: pod-a cookie {ca1:#x} on 3 tasks, pod-b {cb1:#x}");
}
