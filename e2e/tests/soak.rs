//! The short pod-churn soak (the long one is `koord-soak --duration 30m`, see
//! `docs/reliability.md`): 250 pods on one simulated node, one replaced per second for 55 s,
//! koordlet (collecting every 100 ms, so its metric rings fill in the 30 s warm-up) and
//! koord-manager each in its own process; every figure stays within its bound over the last
//! 25 s, and no cgroup or process of a deleted pod is left behind.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::time::Duration;

use koord_e2e::soak::{self, SoakConfig, verdict};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pod_churn_keeps_koordlet_and_manager_flat() {
    let out = tempfile::tempdir().unwrap();
    let config = SoakConfig {
        duration: Duration::from_secs(55),
        warm_up: Duration::from_secs(30),
        pods: 250,
        churn_every: Duration::from_secs(1),
        sample_every: Duration::from_secs(1),
        collect_interval: "100ms".into(),
        out_dir: out.path().to_path_buf(),
        component_exe: env!("CARGO_BIN_EXE_koord-soak").into(),
    };
    let report = soak::run(&config).await.unwrap();
    println!(
        "population ran in {:?}; {} pods churned; {} samples",
        report.population_took,
        report.churned,
        report.samples.len()
    );
    assert!(report.churned >= 50, "{}", report.churned);
    let outcomes = verdict::judge(&report.samples, config.warm_up).expect("enough samples");
    for outcome in &outcomes {
        println!("{outcome}");
    }
    assert!(outcomes.iter().all(|o| o.flat), "a figure grew beyond its bound");
    // Deletions keep up with creations.
    let last = report.samples.last().unwrap();
    assert!(last.pods <= 252, "{last:?}");
}
