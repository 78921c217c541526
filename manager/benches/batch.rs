//! Prints how long the pure decisions take at the issue's scales (no timed assertions):
//! - batch calculation for one node with 110 pods (target ≤ 20 µs);
//! - 5,000 nodes / 150,000 pods recomputed (target ≤ 100 ms on one core);
//! - NodeSLO specs for 5,000 nodes after a ConfigMap change (target ≤ 50 ms).
//!
//! Run: `cargo bench -p koord-manager --bench batch`.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::{collections::BTreeMap, hint::black_box, time::Instant};

use jiff::Timestamp;
use k8s_openapi::{
    api::core::v1::{Node, NodeStatus},
    apimachinery::pkg::api::resource::Quantity,
};
use koord_manager::{
    batch::{Amounts, BatchStrategy, NodeFacts, PodFacts, PodUsage, UsageReport, calculate},
    config_state::ConfigState,
    desired,
};

fn pods(node: usize, count: usize) -> (Vec<PodFacts>, UsageReport) {
    let mut facts = Vec::with_capacity(count);
    let mut usages = Vec::with_capacity(count);
    for i in 0..count {
        let name = format!("pod-{node}-{i}");
        facts.push(PodFacts {
            namespace: "default".into(),
            name: name.clone(),
            active: i % 17 != 0,
            high_priority: i % 3 != 0,
            lse: i % 11 == 0,
            request: Amounts::new(500, 1 << 30),
            mid: false,
            ..PodFacts::default()
        });
        if i % 5 != 0 {
            usages.push(PodUsage {
                namespace: "default".into(),
                name,
                high_priority: i % 3 != 0,
                usage: Amounts::new(200, 600 << 20),
            });
        }
    }
    let report = UsageReport {
        update_time: Some(Timestamp::now()),
        system_usage: Some(Amounts::new(2000, 4 << 30)),
        host_applications: vec![],
        pods: usages,
        ..UsageReport::default()
    };
    (facts, report)
}

fn node_facts() -> NodeFacts {
    NodeFacts {
        capacity: Amounts::new(96_000, 384 << 30),
        allocatable: Amounts::new(94_000, 370 << 30),
        ..NodeFacts::default()
    }
}

fn per_iteration(label: &str, iterations: u32, mut f: impl FnMut()) {
    f(); // warm up
    let start = Instant::now();
    for _ in 0..iterations {
        f();
    }
    let elapsed = start.elapsed() / iterations;
    println!("{label}: {elapsed:?}");
}

fn main() {
    let strategy = BatchStrategy {
        enable: true,
        ..BatchStrategy::default()
    };
    let now = Timestamp::now();
    let node = node_facts();

    let (facts, report) = pods(0, 110);
    per_iteration(
        "batch calculation, 1 node with 110 pods (target <= 20 us)",
        20_000,
        || {
            black_box(calculate(&node, black_box(&facts), Some(&report), &strategy, now));
        },
    );

    let cluster: Vec<(Vec<PodFacts>, UsageReport)> = (0..5_000).map(|n| pods(n, 30)).collect();
    per_iteration(
        "batch calculation, 5,000 nodes / 150,000 pods (target <= 100 ms)",
        5,
        || {
            for (facts, report) in &cluster {
                black_box(calculate(&node, facts, Some(report), &strategy, now));
            }
        },
    );

    let mut state = ConfigState::new();
    let config = BTreeMap::from([
        ("colocation-config".to_owned(), r#"{"enable": true}"#.to_owned()),
        (
            "resource-threshold-config".to_owned(),
            r#"{"clusterStrategy": {"enable": true}, "nodeStrategies": [{"nodeSelector": {"matchLabels": {"pool": "b"}}, "cpuSuppressThresholdPercent": 50}]}"#
                .to_owned(),
        ),
        (
            "cpu-burst-config".to_owned(),
            r#"{"clusterStrategy": {"policy": "auto"}}"#.to_owned(),
        ),
    ]);
    state.apply(Some(&config));
    let nodes: Vec<Node> = (0..5_000)
        .map(|n| {
            let mut node = Node::default();
            node.metadata.name = Some(format!("node-{n}"));
            node.metadata.labels = Some(BTreeMap::from([
                ("pool".to_owned(), if n % 2 == 0 { "a" } else { "b" }.to_owned()),
                ("kubernetes.io/hostname".to_owned(), format!("node-{n}")),
            ]));
            node.status = Some(NodeStatus {
                capacity: Some(BTreeMap::from([("cpu".to_owned(), Quantity("96".to_owned()))])),
                ..NodeStatus::default()
            });
            node
        })
        .collect();
    per_iteration(
        "NodeSLO + NodeMetric specs for 5,000 nodes after a ConfigMap change (target <= 50 ms)",
        5,
        || {
            for node in &nodes {
                let effective = desired::effective(&state, node);
                black_box(desired::node_slo_spec(&state, &effective, None));
                black_box(desired::node_metric_spec(&state, &effective, None));
            }
        },
    );
}
