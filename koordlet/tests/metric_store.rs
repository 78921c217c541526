//! The metric store with a fake clock: window queries, percentiles, expiry, and the memory
//! bound under long uptime and pod churn.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::time::Duration;

use koordlet::metrics::store::nearest_rank;
use koordlet::metrics::{AppendError, MetricKind, MetricStore, MetricTime, SeriesKey, StoreConfig};

fn t(secs: i64) -> MetricTime {
    MetricTime::from_secs(secs)
}

fn node_cpu() -> SeriesKey {
    SeriesKey::node(MetricKind::NodeCpuUsage)
}

#[test]
fn nearest_rank_table() {
    let ten: Vec<f64> = (1..=10).map(f64::from).collect();
    let nine: Vec<f64> = (1..=9).map(f64::from).collect();
    for (values, p, expected) in [
        (&ten, 0.5, 5.0),
        (&ten, 0.9, 9.0),
        (&ten, 0.95, 10.0),
        (&ten, 0.99, 10.0),
        (&ten, 0.0, 1.0),
        (&ten, 1.0, 10.0),
        (&nine, 0.9, 9.0), // upstream's int(n*p)-1 would give 8
        (&nine, 0.5, 5.0),
    ] {
        assert_eq!(
            nearest_rank(values, p),
            Some(expected),
            "n={} p={p}",
            values.len()
        );
    }
    assert_eq!(nearest_rank(&[], 0.5), None);
    assert_eq!(nearest_rank(&[7.0], 0.99), Some(7.0));
}

#[test]
fn short_windows_are_exact() {
    let mut store = MetricStore::new(StoreConfig::default());
    let key = node_cpu();
    for s in 1..=100 {
        store.append(&key, t(s), s as f64).unwrap();
    }
    let w = store.window(&key, t(91), t(100)).unwrap();
    assert_eq!(
        (w.count, w.avg, w.min, w.max, w.latest),
        (10, 95.5, 91.0, 100.0, 100.0)
    );
    assert_eq!((w.p50, w.p90, w.p95, w.p99), (95.0, 99.0, 100.0, 100.0));
    assert_eq!(w.time_span(), Duration::from_secs(9));
    // "Last" query: a window of two intervals.
    assert_eq!(store.window(&key, t(98), t(100)).unwrap().latest, 100.0);
    assert_eq!(store.latest(&key), Some((t(100), 100.0)));
    assert!(store.window(&key, t(200), t(300)).is_none());
    assert!(
        store
            .window(&SeriesKey::of(MetricKind::PodCpuUsage, "nope"), t(0), t(100))
            .is_none()
    );
    assert_eq!(store.percentile(&key, t(1), t(100), 0.25), Some(25.0));
}

#[test]
fn thirty_minute_windows_use_buckets_with_exact_count_and_average() {
    let mut store = MetricStore::new(StoreConfig::default());
    let key = node_cpu();
    // 40 minutes at 1 s; values cycle 0..=99 so every percentile is known.
    let start = 1_700_000_000;
    for i in 0..2400 {
        store.append(&key, t(start + i), (i % 100) as f64).unwrap();
    }
    let now = t(start + 2399);
    let w = store
        .window(&key, now.minus(Duration::from_secs(1800)), now)
        .unwrap();
    // The old edge is resolved to whole one-minute buckets: up to 59 samples of the bucket
    // straddling the start are left out.
    assert!((1741..=1801).contains(&w.count), "count {}", w.count);
    assert!((w.avg - 49.5).abs() < 1.0, "avg {}", w.avg);
    assert_eq!((w.min, w.max), (0.0, 99.0));
    assert!((w.p50 - 50.0).abs() <= 3.0, "p50 {}", w.p50);
    assert!((w.p90 - 90.0).abs() <= 3.0, "p90 {}", w.p90);
    assert!((w.p99 - 99.0).abs() <= 2.0, "p99 {}", w.p99);
    assert!(
        w.time_span() >= Duration::from_secs(1740),
        "span {:?}",
        w.time_span()
    );
    // Retention: 36 buckets + 5 min of fine samples.
    let all = store.window(&key, t(0), now).unwrap();
    assert!(all.count <= 36 * 60 + 300);
}

#[test]
fn pod_config_answers_the_five_minute_report_window() {
    let mut store = MetricStore::new(StoreConfig::pods());
    let key = SeriesKey::of(MetricKind::PodCpuUsage, "uid");
    let start = 1_700_000_000;
    for i in 0..900 {
        store.append(&key, t(start + i), 2.0).unwrap();
    }
    let now = t(start + 899);
    let w = store
        .window(&key, now.minus(Duration::from_secs(300)), now)
        .unwrap();
    assert!((241..=301).contains(&w.count), "count {}", w.count);
    assert_eq!((w.avg, w.p95), (2.0, 2.0));
    assert!(w.time_span() >= Duration::from_secs(240), "{:?}", w.time_span());
}

#[test]
fn bad_samples_are_refused() {
    let mut store = MetricStore::new(StoreConfig::default());
    let key = node_cpu();
    store.append(&key, t(10), 1.0).unwrap();
    assert_eq!(
        store.append(&key, t(10), 2.0),
        Err(AppendError::OutOfOrder {
            last: 10_000,
            given: 10_000
        })
    );
    assert_eq!(
        store.append(&key, t(5), 2.0),
        Err(AppendError::OutOfOrder {
            last: 10_000,
            given: 5_000
        })
    );
    assert!(matches!(
        store.append(&key, t(11), f64::NAN),
        Err(AppendError::NotFinite(_))
    ));
    assert!(matches!(
        store.append(&key, t(11), f64::INFINITY),
        Err(AppendError::NotFinite(_))
    ));
    let long = SeriesKey::of(MetricKind::PodCpuUsage, &"x".repeat(300));
    assert_eq!(
        store.append(&long, t(11), 1.0),
        Err(AppendError::ObjectTooLong(300))
    );
    assert_eq!(store.window(&key, t(0), t(20)).unwrap().count, 1);
}

#[test]
fn vanished_pods_expire_and_the_series_cap_holds() {
    let config = StoreConfig {
        max_series: 3,
        ..StoreConfig::pods()
    };
    let mut store = MetricStore::new(config);
    let pod = |uid: &str| SeriesKey::of(MetricKind::PodCpuUsage, uid);
    store.append(&pod("a"), t(0), 1.0).unwrap();
    store.append(&pod("b"), t(100), 1.0).unwrap();
    store.append(&pod("c"), t(700), 1.0).unwrap();
    // ttl 600 s: "a" (last seen at 0) is gone at 700.
    assert_eq!(store.expire(t(700)), 1);
    assert!(store.latest(&pod("a")).is_none());
    store.append(&pod("d"), t(701), 1.0).unwrap();
    // At the cap, a new series replaces the one appended to least recently ("b").
    store.append(&pod("e"), t(702), 1.0).unwrap();
    assert_eq!(store.series_count(), 3);
    assert!(store.latest(&pod("b")).is_none());
    store.remove_object("e");
    assert_eq!(store.series_count(), 2);
}

#[test]
fn memory_stays_within_the_documented_bound_under_uptime_and_churn() {
    // Node-style config with a small cap that churn overruns, and the pod config.
    for (config, series) in [
        (
            StoreConfig {
                max_series: 64,
                ..StoreConfig::default()
            },
            80,
        ),
        (StoreConfig::pods(), 200),
    ] {
        let bound = config.memory_bound_bytes();
        let mut store = MetricStore::new(config.clone());
        let mut peak = 0;
        // 10,000 appends to each of `series` series, with a fifth of the pods replaced every
        // 1,000 rounds (churn) and expiry run every 60 rounds like the GC loop.
        let key_of = |s: usize, generation: i64| {
            let churned = if s.is_multiple_of(5) { generation } else { 0 };
            SeriesKey::of(
                MetricKind::ContainerCpuUsage,
                &format!("containerd://{s:04}-{churned}"),
            )
        };
        let mut keys: Vec<SeriesKey> = (0..series).map(|s| key_of(s, 0)).collect();
        for round in 0..10_000i64 {
            if round % 1000 == 0 {
                keys = (0..series).map(|s| key_of(s, round / 1000)).collect();
            }
            for key in &keys {
                store.append(key, t(round), (round % 97) as f64).unwrap();
            }
            if round % 60 == 0 {
                store.expire(t(round));
            }
            if round % 500 == 0 {
                peak = peak.max(store.approx_bytes());
            }
        }
        peak = peak.max(store.approx_bytes());
        let per_series = config.series_bytes();
        println!(
            "config fine={} buckets={} max_series={}: {} series, peak {} bytes, bound {} bytes, {} bytes/series buffers",
            config.fine_capacity,
            config.bucket_capacity,
            config.max_series,
            store.series_count(),
            peak,
            bound,
            per_series
        );
        assert!(peak <= bound, "peak {peak} > bound {bound}");
        assert!(store.series_count() <= config.max_series);
    }
}
