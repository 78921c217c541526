//! Prints the metric store's cost at node scale: append throughput, window query latency and
//! memory, for 250 pods × 3 containers (cpu + memory series per pod and container) over 10
//! minutes of simulated 1 s collection, plus the node series over 40 minutes.
//! Run: `cargo bench -p koordlet --bench metric_store`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)] // a bench binary reports by printing

use std::hint::black_box;
use std::time::{Duration, Instant};

use koordlet::metrics::{MetricKind, MetricStore, MetricTime, SeriesKey, StoreConfig};

/// CPU time this process has run, in ns (`/proc/self/schedstat`); wall time on a shared
/// machine says little.
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

fn main() {
    let pods = 250;
    let mut keys = Vec::new();
    for p in 0..pods {
        let uid = format!("{p:08}-aaaa-bbbb-cccc-dddddddddddd");
        keys.push(SeriesKey::of(MetricKind::PodCpuUsage, &uid));
        keys.push(SeriesKey::of(MetricKind::PodMemoryUsage, &uid));
        for c in 0..3 {
            let id = format!("containerd://{p:060}{c:04}");
            keys.push(SeriesKey::of(MetricKind::ContainerCpuUsage, &id));
            keys.push(SeriesKey::of(MetricKind::ContainerMemoryUsage, &id));
        }
    }
    let mut store = MetricStore::new(StoreConfig::pods());
    let rounds = 600;
    let start = Instant::now();
    let cpu_start = cpu_ns();
    for round in 0..rounds {
        for (i, key) in keys.iter().enumerate() {
            store
                .append(
                    key,
                    MetricTime::from_secs(round),
                    ((round as usize * 31 + i) % 1000) as f64,
                )
                .unwrap();
        }
        if round % 60 == 0 {
            store.expire(MetricTime::from_secs(round));
        }
    }
    let append = start.elapsed();
    let append_cpu = cpu_ns().saturating_sub(cpu_start);
    let appends = rounds as usize * keys.len();
    let now = MetricTime::from_secs(rounds - 1);
    let start = Instant::now();
    let cpu_start = cpu_ns();
    for key in &keys {
        black_box(store.window(key, now.minus(Duration::from_secs(300)), now));
    }
    let query = start.elapsed();
    let query_cpu = cpu_ns().saturating_sub(cpu_start);
    println!(
        "pod store: {} series, {appends} appends: wall {append:?}, CPU {:.0} ns/append, {:.2} ms CPU per 1 s round",
        keys.len(),
        append_cpu as f64 / appends as f64,
        append_cpu as f64 / rounds as f64 / 1e6
    );
    println!(
        "pod store: 5-min window over every series: wall {query:?}, CPU {:.1} µs/series",
        query_cpu as f64 / 1e3 / keys.len() as f64
    );
    println!(
        "pod store: {} bytes used, bound {} bytes",
        store.approx_bytes(),
        store.config().memory_bound_bytes()
    );

    let mut node = MetricStore::new(StoreConfig::default());
    let key = SeriesKey::node(MetricKind::NodeCpuUsage);
    for s in 0..2400 {
        node.append(&key, MetricTime::from_secs(s), (s % 97) as f64)
            .unwrap();
    }
    let now = MetricTime::from_secs(2399);
    let start = Instant::now();
    for _ in 0..100 {
        black_box(node.window(&key, now.minus(Duration::from_secs(1800)), now));
    }
    println!(
        "node store: 30-min window with percentiles in {:?}",
        start.elapsed() / 100
    );
    println!("node store: {} bytes used", node.approx_bytes());
}
