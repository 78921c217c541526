//! Benchmarks: how fast the live fast suppress loop reacts to an LS spike on real cgroups,
//! policy `cfsQuota` and policy `cpuset`. Ignored by default (minutes of real CPU load); needs
//! root and cgroup v1 (prints `skipped: <reason>` elsewhere). Run with
//! `cargo test --release -p koordlet --test suppress_latency_bench -- --ignored --nocapture`
//! (`KOORD_BENCH_REPS` changes the 50 repetitions). Prints figures, asserts no timing.

#![allow(clippy::expect_used, clippy::unwrap_used)]

#[path = "../suppress_fast/harness.rs"]
mod harness;
#[allow(dead_code)]
#[path = "../qos_kernel/tree.rs"]
mod tree;

use std::thread::sleep;
use std::time::{Duration, Instant};

use harness::*;
use koord_test_support::Poll;
use koordlet::suppress_loop::SuppressLoop;
use koordlet_core::strategies::fast_suppress::FastSuppressConfig;
use tree::CPU_LOCK;

/// Percentile of sorted values (nearest rank).
fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn summary(name: &str, mut v: Vec<f64>) {
    v.sort_by(f64::total_cmp);
    println!(
        "{name:<38} n={:<3} p50 {:>6.1} ms  p99 {:>6.1} ms  max {:>6.1} ms",
        v.len(),
        pct(&v, 50.0),
        pct(&v, 99.0),
        v.last().copied().unwrap_or(f64::NAN)
    );
}

/// CPU time of this process: Σ over its threads of `schedstat`'s on-CPU ns.
fn process_cpu() -> Duration {
    let mut ns = 0u64;
    for t in std::fs::read_dir("/proc/self/task").expect("tasks").flatten() {
        if let Ok(s) = std::fs::read_to_string(t.path().join("schedstat")) {
            ns += s
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    Duration::from_nanos(ns)
}

#[test]
#[ignore = "benchmark: ~3 min of real cgroup load; run with --ignored --nocapture"]
fn fast_suppress_reaction_latency() {
    let _lock = CPU_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let Some((mut tree, ls)) = pod_tree(2) else {
        return;
    };
    let _agent = AgentCgroup::join(&mut tree);
    let reps: usize = std::env::var("KOORD_BENCH_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let capacity = capacity_milli();
    // Faster recovery between repetitions only; the reaction (decrease) path is the default.
    let fast_cfg = FastSuppressConfig {
        increase_interval: Duration::from_millis(150),
        ..FastSuppressConfig::default()
    };
    let fast = SuppressLoop::new(cgroups(), loop_config(&tree, fast_cfg), None).expect("loop");
    let (snap_tx, snap_rx) = tokio::sync::watch::channel(snapshot(capacity));
    let (stop_tx, runner) = run_loop_in_thread(fast, snap_rx);
    let _ = snap_tx.send_replace(snapshot(capacity));

    // The loop's own cost: 5 s with nothing else in this process running.
    sleep(Duration::from_secs(2));
    let (cpu0, t0) = (process_cpu(), Instant::now());
    sleep(Duration::from_secs(5));
    let cost = (process_cpu() - cpu0).as_secs_f64() / t0.elapsed().as_secs_f64();
    let idle_quota = quota(&tree);
    // With LS idle, the budget is 65 % of the node; with LS at one core, 1000m less.
    let target = (capacity * 65 / 100 - 1000).max(20) * 100;

    let mut first_write = vec![];
    let mut full_write = vec![];
    let mut share_drop = vec![];
    let mut be_before_all = vec![];
    let mut be_after_all = vec![];
    for rep in 0..reps {
        // Back to the idle-LS quota (the loop ramps it up again).
        let _ = Poll::new("the idle-LS quota", Duration::from_secs(10))
            .every(Duration::from_millis(20))
            .until_blocking(|| (quota(&tree) >= idle_quota - 20_000).then_some(()));
        sleep(Duration::from_millis(300 + (rep as u64 * 7) % 50));
        let before_q = quota(&tree);
        let be_before = tree.measure(&["kubepods/besteffort"], Duration::from_millis(200))[0];
        // BE usage samples every 2 ms; the share has "dropped" when BE's usage over the last
        // 100 ms (one CFS period) is below the midpoint of before and the new quota.
        let drop_at = (be_before + target as f64 / 100.0) / 2.0;
        let mut samples = RateWindow::default();
        let step = Instant::now();
        step_ls(&tree, ls, true);
        let (mut first, mut full, mut dropped) = (None, None, None);
        while step.elapsed() < Duration::from_secs(3)
            && (first.is_none() || full.is_none() || dropped.is_none())
        {
            let now = Instant::now();
            let q = quota(&tree);
            if first.is_none() && q < before_q {
                first = Some(now - step);
            }
            if full.is_none() && q <= target + (before_q - target) / 4 {
                full = Some(now - step);
            }
            if let Some(rate) = samples.push(now, tree.cpuacct_ns("kubepods/besteffort"))
                && dropped.is_none()
                && rate <= drop_at
            {
                dropped = Some(now - step);
            }
            sleep(Duration::from_millis(2));
        }
        let be_after = tree.measure(&["kubepods/besteffort"], Duration::from_millis(300))[0];
        step_ls(&tree, ls, false);
        let ms = |d: Option<Duration>| d.map(|d| d.as_secs_f64() * 1000.0);
        be_before_all.push(be_before);
        be_after_all.push(be_after);
        // Each figure on its own: the later ones depend on LS getting its core on this shared
        // machine, the first one only on the loop.
        for (v, d, what) in [
            (&mut first_write, first, "first decrease"),
            (&mut full_write, full, "75 % of the way"),
            (&mut share_drop, dropped, "share drop"),
        ] {
            match ms(d) {
                Some(x) => v.push(x),
                None => {
                    println!(
                        "rep {rep}: no {what} within 3 s (quota before {before_q}, now {})",
                        quota(&tree)
                    );
                }
            }
        }
    }
    let _ = stop_tx.send(());
    let _ = runner.join();
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("fast suppress reaction latency, cfsQuota, tick {TICK:?}, {reps} reps");
    let reacted = first_write.len();
    println!(
        "node {capacity}m, threshold 65 %, quota LS idle {idle_quota} us -> LS at 1 core target {target} us"
    );
    summary("step -> first BE quota decrease", first_write);
    summary("step -> BE quota 75% of way to target", full_write);
    summary("step -> BE measured share dropped", share_drop);
    println!(
        "BE usage before step {:.0}m, 300 ms after {:.0}m (mean)",
        mean(&be_before_all),
        mean(&be_after_all)
    );
    println!(
        "fast loop cost: {:.3} % of one CPU ({:.1} µs per tick), loadavg {}",
        cost * 100.0,
        cost * TICK.as_secs_f64() * 1e6,
        load.trim()
    );
    assert_eq!(reacted, reps, "some repetitions never lowered the BE quota");
}

#[test]
#[ignore = "benchmark: ~2 min of real cgroup load; run with --ignored --nocapture"]
fn fast_suppress_cpuset_reaction_latency() {
    let _lock = CPU_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let Some((mut tree, ls, be)) = cpuset_tree() else {
        return;
    };
    let _agent = AgentCgroup::join(&mut tree);
    let reps: usize = std::env::var("KOORD_BENCH_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let capacity = capacity_milli();
    let all = tree::topology().len();
    let fast_cfg = FastSuppressConfig {
        increase_interval: Duration::from_millis(150),
        ..FastSuppressConfig::default()
    };
    let (_scope_tx, scope_rx) = tokio::sync::watch::channel(Some(cpuset_scope(&tree)));
    let fast = SuppressLoop::new(cgroups(), loop_config(&tree, fast_cfg), None)
        .expect("loop")
        .with_scope_updates(scope_rx);
    let (snap_tx, snap_rx) = tokio::sync::watch::channel(snapshot_with(capacity, "cpuset"));
    let (stop_tx, runner) = run_loop_in_thread(fast, snap_rx);
    let _ = snap_tx.send_replace(snapshot_with(capacity, "cpuset"));
    sleep(Duration::from_secs(2));
    let count = |rel: &str| cpuset_of(&tree, rel).len();
    let mut first_write = vec![];
    let mut all_written = vec![];
    let mut share_drop = vec![];
    let mut ls_rates = vec![];
    let (mut be_before_all, mut be_after_all) = (vec![], vec![]);
    for rep in 0..reps {
        let _ = Poll::new("BE back on every CPU", Duration::from_secs(10))
            .every(Duration::from_millis(20))
            .until_blocking(|| (count("kubepods/besteffort") >= all).then_some(()));
        sleep(Duration::from_millis(300 + (rep as u64 * 7) % 50));
        let be_before = tree.measure(&["kubepods/besteffort"], Duration::from_millis(200))[0];
        // BE on one CPU uses at most 1000m.
        let drop_at = (be_before + 1000.0) / 2.0;
        let mut samples = RateWindow::default();
        let step = Instant::now();
        step_ls(&tree, ls, true);
        let (mut first, mut full, mut dropped) = (None, None, None);
        // LS's usage from the step to the moment the besteffort set was narrowed (or to the
        // end of the repetition): tells a late loop from an LS that did not get its CPU.
        let ls_at_step = tree.cpuacct_ns("kubepods/ls");
        let ls_rate_since = |now: Instant| {
            let ns = tree.cpuacct_ns("kubepods/ls").saturating_sub(ls_at_step);
            ns as f64 / (now - step).as_nanos().max(1) as f64 * 1000.0
        };
        let mut ls_rate = 0.0;
        while step.elapsed() < Duration::from_secs(3)
            && (first.is_none() || full.is_none() || dropped.is_none())
        {
            let now = Instant::now();
            // Children are narrowed first, the besteffort dir last.
            if first.is_none() && count(BE_CONTAINER) < all {
                first = Some(now - step);
            }
            if full.is_none() && count("kubepods/besteffort") < all {
                full = Some(now - step);
                ls_rate = ls_rate_since(now);
            }
            if let Some(rate) = samples.push(now, tree.cpuacct_ns("kubepods/besteffort"))
                && dropped.is_none()
                && rate <= drop_at
            {
                dropped = Some(now - step);
            }
            sleep(Duration::from_millis(2));
        }
        if full.is_some() {
            ls_rates.push(ls_rate);
        } else {
            println!(
                "rep {rep}: LS used {:.0}m in the 3 s after the step",
                ls_rate_since(Instant::now())
            );
        }
        let be_after = tree.measure(&["kubepods/besteffort"], Duration::from_millis(300))[0];
        if full.is_some() {
            let set = cpuset_of(&tree, BE_CONTAINER);
            for pid in &be {
                assert_eq!(allowed(*pid), set, "BE burner {pid} not confined");
            }
        }
        step_ls(&tree, ls, false);
        let ms = |d: Option<Duration>| d.map(|d| d.as_secs_f64() * 1000.0);
        be_before_all.push(be_before);
        be_after_all.push(be_after);
        for (v, d, what) in [
            (&mut first_write, first, "container narrowed"),
            (&mut all_written, full, "besteffort narrowed"),
            (&mut share_drop, dropped, "share drop"),
        ] {
            match ms(d) {
                Some(x) => v.push(x),
                None => println!("rep {rep}: no {what} within 3 s"),
            }
        }
    }
    let _ = stop_tx.send(());
    let _ = runner.join();
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let reacted = all_written.len();
    let mut worst: Vec<(usize, f64, f64)> = all_written
        .iter()
        .zip(&ls_rates)
        .enumerate()
        .map(|(rep, (ms, ls))| (rep, *ms, ls.round()))
        .collect();
    worst.sort_by(|a, b| b.1.total_cmp(&a.1));
    worst.truncate(3);
    println!("fast suppress reaction latency, cpuset, tick {TICK:?}, {reps} reps, min BE cpus 1");
    println!("slowest (rep, ms to all BE cpusets written, LS milli-cores from the step to then): {worst:?}");
    let mut sorted_ls = ls_rates.clone();
    sorted_ls.sort_by(f64::total_cmp);
    println!(
        "LS usage from the step to the narrowing: p50 {:.0}m, min {:.0}m",
        sorted_ls.get(sorted_ls.len() / 2).copied().unwrap_or(0.0),
        sorted_ls.first().copied().unwrap_or(0.0)
    );
    println!(
        "node {capacity}m ({all} CPUs), threshold 65 %: BE {all} CPUs with LS idle -> 1 with LS at one core"
    );
    summary("step -> BE container cpuset narrowed", first_write);
    summary("step -> all BE cpusets written", all_written);
    summary("step -> BE measured share dropped", share_drop);
    println!(
        "BE usage before step {:.0}m, 300 ms after {:.0}m (mean); loadavg {}",
        mean(&be_before_all),
        mean(&be_after_all),
        load.trim()
    );
    assert_eq!(reacted, reps, "some repetitions never narrowed the BE cpuset");
}
