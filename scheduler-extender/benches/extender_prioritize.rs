//! Prioritize with 5,000 candidate nodes (nodeCacheCapable: names only), 20 pods per node:
//! the whole call as the HTTPS handler runs it (JSON in, cache lookups, scores, JSON out).
//! Prints p50/p99 per call for a BE and an LS pod after 20 warm-up calls. Target: p99 ≤ 5 ms.
//!
//! `cargo bench -p koord-scheduler-extender --bench extender_prioritize`

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeMap;
use std::time::Instant;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Container, Node, NodeStatus, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use koord_api::nodemetric::{NodeMetric, NodeMetricInfo, NodeMetricStatus, ResourceMap};
use koord_scheduler_extender::cluster::ClusterCache;
use koord_scheduler_extender::decide::MetricFacts;
use koord_scheduler_extender::decide::Policy;
use koord_scheduler_extender::extender::Extender;
use koord_scheduler_extender::facts::ScalingFactors;
use koord_scheduler_extender::facts::{NodeEntry, metric_facts, node_entry};
use koord_scheduler_extender::ledger::PodLedger;
use koord_scheduler_extender::metrics::ExtenderMetrics;
use koord_scheduler_extender::table::Table;
use koord_scheduler_extender::wire::ExtenderArgs;
use kube::runtime::watcher::Event;

const NODES: usize = 5_000;
const PODS_PER_NODE: usize = 20;
const CALLS: usize = 300;
const WARM_UP: usize = 20;

fn list(pairs: &[(&str, String)]) -> BTreeMap<String, Quantity> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Quantity(v.clone())))
        .collect()
}

fn pod(name: String, node: Option<String>, batch: bool) -> Pod {
    let requests = if batch {
        list(&[
            ("kubernetes.io/batch-cpu", "500".into()),
            ("kubernetes.io/batch-memory", "1Gi".into()),
        ])
    } else {
        list(&[("cpu", "250m".into()), ("memory", "512Mi".into())])
    };
    Pod {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some("bench".into()),
            creation_timestamp: Some(Time("2026-11-25T09:00:00Z".parse().unwrap())),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: node,
            containers: vec![Container {
                name: "main".into(),
                resources: Some(ResourceRequirements {
                    requests: Some(requests.clone()),
                    limits: Some(requests),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    let now: Timestamp = "2026-11-25T10:00:00Z".parse().unwrap();
    let nodes: Table<NodeEntry> = Table::default();
    let metrics: Table<MetricFacts> = Table::default();
    let ledger = PodLedger::new(ScalingFactors::default());
    ledger.apply(Event::Init);
    let mut names = Vec::with_capacity(NODES);
    for i in 0..NODES {
        let name = format!("node-{i:05}");
        let node = Node {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some([("kubernetes.io/hostname".to_owned(), name.clone())].into()),
                ..Default::default()
            },
            status: Some(NodeStatus {
                allocatable: Some(list(&[
                    ("cpu", "32".into()),
                    ("memory", "128Gi".into()),
                    ("kubernetes.io/batch-cpu", format!("{}", 8_000 + (i % 100) * 50)),
                    ("kubernetes.io/batch-memory", format!("{}Gi", 20 + i % 10)),
                ])),
                ..Default::default()
            }),
            ..Default::default()
        };
        nodes.apply(Event::Apply(node), node_entry);
        let mut metric = NodeMetric::new(&name, Default::default());
        metric.status = Some(NodeMetricStatus {
            update_time: Some(Time("2026-11-25T09:59:30Z".parse().unwrap())),
            node_metric: Some(NodeMetricInfo {
                node_usage: ResourceMap {
                    resources: list(&[
                        ("cpu", format!("{}m", 4_000 + (i % 50) * 100)),
                        ("memory", "40Gi".into()),
                    ]),
                    ..Default::default()
                },
                ..Default::default()
            }),
            ..Default::default()
        });
        metrics.apply(Event::Apply(metric), |m| metric_facts(Some(m)));
        for p in 0..PODS_PER_NODE {
            ledger.apply(Event::InitApply(pod(
                format!("{name}-{p}"),
                Some(name.clone()),
                p % 2 == 0,
            )));
        }
        names.push(name);
    }
    ledger.apply(Event::InitDone);
    let extender = Extender {
        cache: ClusterCache::from_parts(nodes, metrics, ledger),
        policy: Policy::default(),
        factors: ScalingFactors::default(),
        metrics: ExtenderMetrics::default(),
    };
    for (label, batch) in [("BE pod", true), ("LS pod", false)] {
        let body = serde_json::to_vec(&serde_json::json!({
            "Pod": pod("incoming".into(), None, batch),
            "NodeNames": names,
        }))
        .unwrap();
        // Warm-up: first touches of the tables and the allocator's arenas.
        for _ in 0..WARM_UP {
            let args: ExtenderArgs = serde_json::from_slice(&body).unwrap();
            std::hint::black_box(extender.prioritize(&args, now));
        }
        let mut samples = Vec::with_capacity(CALLS);
        for _ in 0..CALLS {
            let started = Instant::now();
            let args: ExtenderArgs = serde_json::from_slice(&body).unwrap();
            let answer = serde_json::to_vec(&extender.prioritize(&args, now)).unwrap();
            samples.push(started.elapsed().as_secs_f64() * 1e3);
            assert!(answer.len() > NODES * 10);
        }
        samples.sort_by(f64::total_cmp);
        println!(
            "prioritize, {NODES} nodes, {} pods, {label}: p50 {:.2} ms, p99 {:.2} ms ({CALLS} calls)",
            NODES * PODS_PER_NODE,
            percentile(&samples, 0.50),
            percentile(&samples, 0.99)
        );
    }
}
