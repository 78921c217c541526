//! Figures, not assertions: `cargo test -p koord-api --test config -- --ignored --nocapture bench`.

use std::time::Instant;

use koord_api::config::SloConfig;

use super::{data, node};

#[test]
#[ignore = "benchmark: prints figures"]
fn bench_parse_and_per_node_resolution() {
    let entries: Vec<String> = (0..50)
        .map(|i| format!(r#"{{"name": "p{i}", "nodeSelector": {{"matchLabels": {{"pool": "p{i}"}}}}, "cpuSuppressThresholdPercent": {}}}"#, i % 100))
        .collect();
    let threshold = format!(
        r#"{{"clusterStrategy": {{"enable": true}}, "nodeStrategies": [{}]}}"#,
        entries.join(",")
    );
    let d = data(&[
        ("resource-threshold-config", threshold.as_str()),
        (
            "cpu-burst-config",
            include_str!("../fixtures/seed000_cpu-burst-config.json"),
        ),
        ("colocation-config", r#"{"enable": true}"#),
    ]);
    let rounds = 200;
    let start = Instant::now();
    for _ in 0..rounds {
        assert!(SloConfig::parse(&d).errors().is_empty());
    }
    let parse = start.elapsed() / rounds;
    let cfg = SloConfig::parse(&d).into_config().unwrap();
    let nodes: Vec<_> = (0..10_000)
        .map(|i| node(&[("pool", &format!("p{}", i % 60))], &[]))
        .collect();
    let start = Instant::now();
    let specs: usize = nodes
        .iter()
        .map(|n| usize::from(cfg.for_node(n).node_slo_spec().cpu_burst_strategy.is_some()))
        .sum();
    let per_node = start.elapsed() / 10_000;
    assert_eq!(specs, 10_000);
    println!("parse+merge+validate of a 3-key ConfigMap with 50 node entries: {parse:?}");
    println!("for_node + node_slo_spec, 50 entries, 10000 nodes: {per_node:?} per node");
}
