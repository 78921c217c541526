#![allow(clippy::unwrap_used, clippy::expect_used)]
use std::sync::Arc;

use super::*;
use crate::metrics::collector::Stores;
use serde_json::json;

const GI: f64 = 1024.0 * 1024.0 * 1024.0;
const T0: i64 = 1_700_000_000_000;

fn pod(name: &str, uid: &str, labels: serde_json::Value, cpu: &str, memory: &str) -> PodMeta {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": uid, "labels": labels,
                     "creationTimestamp": "2023-01-01T00:00:00Z"},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]},
        "status": {"phase": "Running"}
    }))
    .unwrap();
    PodMeta::new(Arc::new(pod)).unwrap()
}

fn node(cpu: &str, memory: &str) -> Node {
    serde_json::from_value(json!({"metadata": {"name": "n"},
        "status": {"capacity": {"cpu": cpu, "memory": memory}}}))
    .unwrap()
}

fn settings() -> PredictionSettings {
    PredictionSettings {
        predict: PredictSettings {
            cold_start: Duration::ZERO,
            safety_margin_percent: 10,
        },
        training_interval: Duration::from_secs(1),
        ..PredictionSettings::default()
    }
}

/// Usage of pod `uid` and the system every second for `seconds` from `start`.
fn feed(stores: &mut Stores, uids: &[(&str, f64, f64)], sys: (f64, f64), start: i64, seconds: i64) {
    for s in 0..seconds {
        let t = MetricTime(start + s * 1000);
        for (uid, cpu, mem) in uids {
            stores
                .pods
                .append_to(MetricKind::PodCpuUsage, uid, t, *cpu)
                .unwrap();
            stores
                .pods
                .append_to(MetricKind::PodMemoryUsage, uid, t, *mem)
                .unwrap();
        }
        stores
            .node
            .append_to(MetricKind::SysCpuUsage, "", t, sys.0)
            .unwrap();
        stores
            .node
            .append_to(MetricKind::SysMemoryUsage, "", t, sys.1)
            .unwrap();
    }
}

#[test]
fn training_builds_pod_class_and_system_models_and_predicts() {
    let pods = vec![
        pod(
            "web",
            "uid-web",
            json!({"koordinator.sh/qosClass": "LS"}),
            "2",
            "4Gi",
        ),
        pod(
            "job",
            "uid-job",
            json!({"koordinator.sh/qosClass": "BE"}),
            "0",
            "0",
        ),
    ];
    let mut stores = Stores::default();
    let mut server = PredictServer::new(settings());
    // Nothing trained yet: no sys model, no prediction.
    assert_eq!(
        server.predict(&pods, Some(&node("8", "16Gi")), T0).unwrap_err(),
        Unavailable::Missing(MissingModel::System)
    );
    for s in 0..30 {
        feed(
            &mut stores,
            &[("uid-web", 0.5, 1.0 * GI), ("uid-job", 3.0, 2.0 * GI)],
            (0.2, 0.5 * GI),
            T0 + s * 1000,
            1,
        );
        let r = server.train(&pods, &stores.node, &stores.pods, MetricTime(T0 + s * 1000));
        assert_eq!(r.trained, 5, "second {s}"); // web, job, prod, none, sys
    }
    // Training again at the same time adds nothing (the samples were taken).
    let again = server.train(&pods, &stores.node, &stores.pods, MetricTime(T0 + 29_500));
    assert_eq!(again.trained, 2, "only the class items, at the new time");
    assert_eq!(server.model_count(), 5);
    let prod = server.model(PROD_ITEM).unwrap().peak().unwrap();
    assert!((0.5..0.53).contains(&prod.cpu_cores), "{prod:?}");
    // The BE pod is in neither class.
    let none = server.model(NONE_ITEM).unwrap().peak().unwrap();
    assert!(none.cpu_cores <= 0.01, "{none:?}");
    let p = server
        .predict(&pods, Some(&node("8", "16Gi")), T0 + 30_000)
        .unwrap();
    // Pod: 2 − 0.5×1.1 ≈ 1.45 cores; priority: 2 − (0.2 + 0.5 + 0)×1.1 ≈ 1.23 cores.
    assert!((1.40..1.46).contains(&p.pod.result.cpu_cores), "{p:?}");
    assert!((1.18..1.24).contains(&p.priority.result.cpu_cores), "{p:?}");
    assert_eq!(p.result.cpu_cores, p.priority.result.cpu_cores);
    assert!(
        p.result.memory_bytes > 2.0 * GI && p.result.memory_bytes < 3.0 * GI,
        "{p:?}"
    );
    let metric = run::reclaimable_metric(&p);
    let cpu = &metric.resource.resources["cpu"].0;
    assert_eq!(*cpu, format!("{}m", (p.result.cpu_cores * 1000.0) as i64));
    assert_eq!(
        metric.resource.resources["memory"].0,
        format!("{}", p.result.memory_bytes as i64)
    );
    // The prod peak: (prod ≈ 0.5 + none ≈ 0) × 1.1 cores, the system left out.
    let metrics = run::predicted_metrics(&p);
    assert_eq!(metrics.prod_reclaimable, metric);
    let peak: i64 = metrics.prod_peak.resource.resources["cpu"]
        .0
        .trim_end_matches('m')
        .parse()
        .unwrap();
    assert!((550..590).contains(&peak), "{peak}m from {p:?}");
    // No Node capacity: unavailable.
    assert_eq!(
        server.predict(&pods, None, T0).unwrap_err(),
        Unavailable::NoCapacity
    );
}

#[test]
fn stale_samples_are_not_trained_and_gone_pods_expire() {
    let pods = vec![pod(
        "web",
        "uid-web",
        json!({"koordinator.sh/qosClass": "LS"}),
        "1",
        "1Gi",
    )];
    let mut stores = Stores::default();
    let mut server = PredictServer::new(PredictionSettings {
        model_expiration: Duration::from_secs(60),
        ..settings()
    });
    feed(&mut stores, &[("uid-web", 0.1, GI)], (0.1, GI), T0, 1);
    assert_eq!(
        server
            .train(&pods, &stores.node, &stores.pods, MetricTime(T0))
            .trained,
        4
    );
    // 30 s later the samples are stale: only the class items (0 usage now) are trained.
    let r = server.train(&pods, &stores.node, &stores.pods, MetricTime(T0 + 30_000));
    assert_eq!(r.trained, 2);
    // 2 min later the pod's and the system's models expire.
    let r = server.train(&[], &stores.node, &stores.pods, MetricTime(T0 + 120_000));
    assert_eq!(r.expired, 2);
    assert!(server.model("uid-web").is_none() && server.model(SYS_ITEM).is_none());
    assert!(server.model(PROD_ITEM).is_some());
}

struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("koordlet-prediction-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn checkpoint_round_trip_restores_the_same_predictions() {
    let dir = TempDir::new("roundtrip");
    let path = dir.0.join("sub").join(checkpoint::FILE_NAME);
    let pods = vec![pod(
        "web",
        "uid-web",
        json!({"koordinator.sh/qosClass": "LS"}),
        "2",
        "4Gi",
    )];
    let mut stores = Stores::default();
    let mut server = PredictServer::new(settings());
    for s in 0..20 {
        feed(
            &mut stores,
            &[("uid-web", 0.3 + 0.01 * s as f64, GI)],
            (0.2, GI),
            T0 + s * 1000,
            1,
        );
        server.train(&pods, &stores.node, &stores.pods, MetricTime(T0 + s * 1000));
    }
    let saved = server.checkpoint();
    assert_eq!(saved.models.len(), 4);
    checkpoint::save(&path, &saved).unwrap();
    // No temporary file left behind.
    let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, [checkpoint::FILE_NAME]);
    let mut restarted = PredictServer::new(settings());
    assert_eq!(checkpoint::restore_into(&mut restarted, &path).unwrap(), 4);
    let node = node("8", "16Gi");
    assert_eq!(
        restarted.predict(&pods, Some(&node), T0 + 20_000).unwrap(),
        server.predict(&pods, Some(&node), T0 + 20_000).unwrap()
    );
    // A missing file is a fresh start.
    let mut fresh = PredictServer::new(settings());
    assert_eq!(
        checkpoint::restore_into(&mut fresh, &dir.0.join("none.json")).unwrap(),
        0
    );
}

#[test]
fn a_corrupt_checkpoint_is_reported_and_ignored() {
    let dir = TempDir::new("corrupt");
    std::fs::create_dir_all(&dir.0).unwrap();
    let path = dir.0.join(checkpoint::FILE_NAME);
    let mut server = PredictServer::new(settings());
    for (body, want) in [
        ("{not json", "is corrupt"),
        (r#"{"version": 7, "models": {}}"#, "has version 7"),
        (
            r#"{"version": 1, "models": {"x": {"cpu": {"referenceMs": 0, "buckets": [[5000, 1.0]]},
                "memory": {"referenceMs": 0, "buckets": [[1, 1.0]]}, "lastSampleMs": 0}}}"#,
            "bad histogram",
        ),
    ] {
        std::fs::write(&path, body).unwrap();
        let error = checkpoint::restore_into(&mut server, &path).unwrap_err();
        assert!(error.to_string().contains(want), "{error}");
        assert_eq!(server.model_count(), 0);
    }
}
