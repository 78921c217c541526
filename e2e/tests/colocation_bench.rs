//! The colocation benchmark's quick mode end to end: real nginx and stress-ng in the simulated
//! node's cgroups, koordlet in-process, one point per policy. Ignored: about two minutes of
//! real CPU load, and it needs root, cgroup v1 and `scripts/install-bench-workloads.sh`
//! (prints `skipped: <reason>` otherwise). Run with
//! `cargo test -p koord-e2e --test colocation_bench -- --ignored --nocapture`.
//! The figures come from `koord-bench colocation` (docs/benchmarks.md); this only checks that
//! every policy produces a point with a sane BE share.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use koord_e2e::bench::{self, BenchError, Options, policy, report, target::Target, workloads::LsWorkload};
use koord_testcluster::node::host_binary::installed;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark smoke: ~2 min of real load; run with --ignored --nocapture"]
async fn colocation_quick_mode_measures_every_policy() {
    if let Some(missing) = ["nginx", "stress-ng"]
        .into_iter()
        .find(|p| installed(p).is_none())
    {
        println!("skipped: {missing} not installed (scripts/install-bench-workloads.sh)");
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let opts = Options {
        reps: 1,
        duration: Duration::from_secs(3),
        warmup: Duration::from_secs(2),
        loads: vec![60],
        policies: policy::all().iter().map(|p| p.name.to_string()).collect(),
        workloads: vec![LsWorkload::Nginx],
        capacity_window: Duration::from_secs(2),
        connections: 8,
        timeout: Duration::from_secs(1),
        namespace: "koord-bench".into(),
        images: BTreeMap::new(),
        work_dir: work.path().to_path_buf(),
        ls_cpu_request: "1".into(),
        be_batch_milli_cpu: None,
    };
    let mut target = Target::embedded(&opts.namespace).await.unwrap();
    let outcome = bench::run(&opts, &mut target).await;
    target.leave().await;
    let outcome = match outcome {
        Err(BenchError::Skip(reason)) => {
            println!("skipped: {reason}");
            return;
        }
        other => other.unwrap(),
    };
    let rows = report::aggregate(&outcome.points, "ls-alone");
    println!("{}", report::markdown(&rows));
    assert!(outcome.capacity["nginx"] > 0.0);
    assert_eq!(rows.len() + outcome.skipped.len(), policy::all().len());
    for row in &rows {
        assert!(row.failed.2 > 0, "{row:?}");
        if row.policy != "ls-alone" {
            let (share, _, _) = row.be_share.expect("BE share");
            assert!(share > 0.0 && share < 2.0, "{row:?}");
        }
    }
}
