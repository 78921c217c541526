//! Tier 3 (real cgroup v1): a koordlet killed with SIGKILL in the middle of an ordered
//! parent/child write sequence leaves only states the kernel accepted, and the next koordlet
//! (a fresh executor, nothing cached) reaches its plan from any of them.
//!
//! The sequence: a pod cgroup and its container, CFS quota on both and a burst on the
//! container, flipped between a loose and a tight plan. v1 refuses a child quota above its
//! parent's and a burst above its quota, so only the executor's order (loosen top-down, tighten
//! bottom-up, burst around its quota) gets through.
//! - Every kill point, deterministically: the sequence's first `k` steps are applied (what the
//!   kernel holds when the process dies after step `k`), then a fresh executor applies the plan.
//! - Real SIGKILLs: this test binary re-runs itself as a flipper applying the two plans in a
//!   loop, is killed at staggered moments, and a fresh executor applies the plan each time.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use koord_test_support::cgroup::CgroupV1Tree;
use koordlet::executor::order::order_writes;
use koordlet::executor::{CgroupWrite, Executor, ExecutorConfig};
use koordlet::system::{CgroupDir, CgroupResource, CgroupValue, Cgroups, SystemRoots};

/// Env var naming the tree for the flipper run of this binary.
const FLIP_TREE: &str = "KOORD_TEST_FLIP_TREE";
const KILLS: u64 = 24;

/// (pod quota, container quota, container burst).
const LOOSE: (i64, i64, i64) = (200_000, 150_000, 100_000);
const TIGHT: (i64, i64, i64) = (50_000, 40_000, 20_000);

fn dirs(tree_name: &str) -> (CgroupDir, CgroupDir) {
    (
        CgroupDir::new(format!("{tree_name}/pod")).unwrap(),
        CgroupDir::new(format!("{tree_name}/pod/c")).unwrap(),
    )
}

fn plan(tree_name: &str, (pod, container, burst): (i64, i64, i64)) -> Vec<CgroupWrite> {
    let (p, c) = dirs(tree_name);
    vec![
        CgroupWrite::int(&p, CgroupResource::CpuCfsQuota, pod, "test"),
        CgroupWrite::int(&c, CgroupResource::CpuCfsQuota, container, "test"),
        CgroupWrite::int(&c, CgroupResource::CpuCfsBurst, burst, "test"),
    ]
}

fn state(cgroups: &Cgroups, tree_name: &str) -> (i64, i64, i64) {
    let (p, c) = dirs(tree_name);
    let int = |dir: &CgroupDir, r: CgroupResource| match cgroups.read(r, dir).unwrap() {
        CgroupValue::Int(v) => v,
        other => panic!("{other:?}"),
    };
    (
        int(&p, CgroupResource::CpuCfsQuota),
        int(&c, CgroupResource::CpuCfsQuota),
        int(&c, CgroupResource::CpuCfsBurst),
    )
}

/// A state the kernel could hold: child quota within the parent's, burst within the quota.
fn valid((pod, container, burst): (i64, i64, i64)) -> bool {
    container <= pod && burst <= container
}

fn fresh_executor(cgroups: &Arc<Cgroups>) -> Executor {
    Executor::new(
        cgroups.clone(),
        ExecutorConfig {
            force_refresh: Duration::ZERO,
            dry_run: false,
        },
    )
}

/// The flipper: applies the two plans in turn until killed.
fn flip(tree_name: &str) -> ! {
    let cgroups = Arc::new(Cgroups::detect(&SystemRoots::default()).unwrap());
    let mut executor = fresh_executor(&cgroups);
    loop {
        for target in [TIGHT, LOOSE] {
            let report = executor.apply(plan(tree_name, target), Instant::now());
            assert!(report.errors.is_empty(), "{:?}", report.errors);
        }
    }
}

#[test]
fn a_kill_anywhere_in_an_ordered_write_sequence_leaves_a_state_the_next_koordlet_completes() {
    if let Ok(tree_name) = std::env::var(FLIP_TREE) {
        flip(&tree_name);
    }
    let Some(tree) = CgroupV1Tree::or_skip(&["cpu"]) else {
        return;
    };
    if !tree.path("cpu", "").join("cpu.cfs_burst_us").exists() {
        println!("skipped: this kernel has no cpu.cfs_burst_us");
        return;
    }
    tree.mkdir("pod/c").unwrap();
    let cgroups = Arc::new(Cgroups::detect(&SystemRoots::default()).unwrap());
    let name = tree.name().to_string();
    let set = |target| {
        let report = fresh_executor(&cgroups).apply(plan(&name, target), Instant::now());
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        assert_eq!(state(&cgroups, &name), target);
    };

    // The wrong order is refused by this kernel (otherwise the test proves nothing).
    set(LOOSE);
    let (p, _) = dirs(&name);
    let refused = fresh_executor(&cgroups).apply(
        vec![CgroupWrite::int(&p, CgroupResource::CpuCfsQuota, TIGHT.0, "test")],
        Instant::now(),
    );
    assert!(
        !refused.errors.is_empty(),
        "a parent quota below its child's was accepted"
    );

    // Every kill point of both sequences.
    for (from, to) in [(LOOSE, TIGHT), (TIGHT, LOOSE)] {
        set(from);
        let current = plan(&name, to)
            .into_iter()
            .map(|w| {
                let now = cgroups.read(w.resource, &w.cgroup).ok();
                (w, now)
            })
            .collect();
        let steps = order_writes(current);
        assert!(steps.len() >= 3, "{steps:?}");
        for k in 0..=steps.len() {
            set(from);
            for step in &steps[..k] {
                let report = fresh_executor(&cgroups).apply(vec![step.write.clone()], Instant::now());
                assert!(
                    report.errors.is_empty(),
                    "step {k} of {from:?} -> {to:?}: {:?}",
                    report.errors
                );
            }
            let killed_at = state(&cgroups, &name);
            assert!(valid(killed_at), "{killed_at:?}");
            // The restarted koordlet reaches its plan in one round.
            set(to);
        }
    }

    // Real SIGKILLs at staggered moments.
    let exe = std::env::current_exe().unwrap();
    let mut mid_sequence = 0;
    for i in 0..KILLS {
        let mut flipper = Command::new(&exe)
            .args([
                "a_kill_anywhere_in_an_ordered_write_sequence_leaves_a_state_the_next_koordlet_completes",
                "--exact",
                "--nocapture",
            ])
            .env(FLIP_TREE, &name)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(30 + i * 7));
        let exited = flipper.try_wait().unwrap();
        assert!(exited.is_none(), "the flipper failed: {exited:?}");
        flipper.kill().unwrap(); // SIGKILL
        flipper.wait().unwrap();
        let killed_at = state(&cgroups, &name);
        assert!(valid(killed_at), "{killed_at:?}");
        if killed_at != LOOSE && killed_at != TIGHT {
            mid_sequence += 1;
        }
        set(if i % 2 == 0 { LOOSE } else { TIGHT });
    }
    println!("{KILLS} SIGKILLs, {mid_sequence} in the middle of a sequence; every state valid and completed");
}
