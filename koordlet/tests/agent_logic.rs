//! The agent's pure parts: pod states merge, BE limits, NodeMetric status, `plan`, collector.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

mod common;

use koord_api::KubeQoSClass;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use koordlet::metrics::collector::{Collector, Stores};
use koordlet::metrics::{MetricKind, MetricTime, SeriesKey};
use koordlet::plan::{PlanOptions, parse_input, plan};
use koordlet::report::{ReportInput, build_status};
use koordlet::states::{
    NodeMetricSettings, PodMeta, PodsOutcome, Snapshot, merge_pods, parse_kubelet_pods, sources,
};
use koordlet::system::{CgroupDriver, CgroupVersion, Cgroups, KubeCgroupPaths};
use koordlet_core::strategies::be_limits::{self, BeLimitsSettings};
use serde_json::json;

fn pod(value: serde_json::Value) -> Pod {
    serde_json::from_value(value).unwrap()
}

fn be_pod(uid: &str, containers: serde_json::Value, statuses: serde_json::Value) -> Pod {
    pod(json!({
        "metadata": {"name": format!("p-{uid}"), "namespace": "ns", "uid": uid,
                     "labels": {"koordinator.sh/qosClass": "BE"}},
        "spec": {"containers": containers},
        "status": {"qosClass": "BestEffort", "phase": "Running", "containerStatuses": statuses}
    }))
}

fn metas(pods: Vec<Pod>) -> Vec<PodMeta> {
    pods.into_iter()
        .map(|p| PodMeta::new(Arc::new(p)).unwrap())
        .collect()
}

#[test]
fn kubelet_empty_or_failed_answer_keeps_the_previous_list() {
    let body = serde_json::to_vec(&json!({"kind": "PodList", "items": [
        {"metadata": {"name": "a", "namespace": "x", "uid": "u1"}},
        {"metadata": {"name": "bad", "namespace": "x", "uid": "../etc"}}
    ]}))
    .unwrap();
    let (pods, outcome) = merge_pods(&Arc::new(Vec::new()), parse_kubelet_pods(&body));
    assert_eq!(pods.len(), 1);
    assert!(matches!(outcome, PodsOutcome::Replaced { pods: 1, ref rejected, .. } if rejected.len() == 1));
    let (kept, outcome) = merge_pods(&pods, parse_kubelet_pods(br#"{"items":[]}"#));
    assert_eq!(outcome, PodsOutcome::KeptEmptyAnswer);
    assert!(Arc::ptr_eq(&kept, &pods));
    let (kept, outcome) = merge_pods(&pods, parse_kubelet_pods(br#"{"items":null}"#));
    assert_eq!(outcome, PodsOutcome::KeptEmptyAnswer);
    assert_eq!(kept.len(), 1);
    let refused = sources::kubelet_client("not a url", None)
        .map(|_| ())
        .unwrap_err();
    let (kept, outcome) = merge_pods(&pods, Err(refused));
    assert!(matches!(outcome, PodsOutcome::KeptOnError(_)));
    assert_eq!(kept.len(), 1);
    assert!(parse_kubelet_pods(b"<html>").is_err());
}

proptest::proptest! {
    #[test]
    fn arbitrary_kubelet_answers_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
        let previous = Arc::new(Vec::new());
        let _ = merge_pods(&previous, parse_kubelet_pods(&bytes));
    }

    #[test]
    fn arbitrary_json_pods_never_panic(uid in ".{0,40}", cid in ".{0,40}", batch in ".{0,12}") {
        let body = json!({"items": [{"metadata": {"uid": uid, "labels": {"koordinator.sh/qosClass": "BE"}},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"kubernetes.io/batch-cpu": batch}}}]},
            "status": {"containerStatuses": [{"name": "c", "containerID": cid, "image": "", "imageID": "",
                       "ready": true, "restartCount": 0}]}}]});
        let bytes = serde_json::to_vec(&body).unwrap();
        let (pods, _) = merge_pods(&Arc::new(Vec::new()), parse_kubelet_pods(&bytes));
        let _ = be_limits::decide(&pods, &KubeCgroupPaths::new(CgroupDriver::Systemd), BeLimitsSettings::default());
    }
}

fn value_of(plan: &be_limits::BeLimitsPlan, dir: &str, file: &str) -> String {
    plan.writes
        .iter()
        .find(|w| w.cgroup.to_string() == dir && w.file() == file)
        .unwrap_or_else(|| panic!("no write {dir} {file}: {:?}", plan.writes))
        .value
        .to_string()
}

#[test]
fn be_limits_pod_and_container_values() {
    let uid = "aaaaaaaa-0000-0000-0000-000000000001";
    let pods = metas(vec![be_pod(
        uid,
        json!([
            {"name": "a", "resources": {"requests": {"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "1Gi"},
                                         "limits": {"kubernetes.io/batch-cpu": "2000", "kubernetes.io/batch-memory": "2Gi"}}},
            {"name": "b", "resources": {"requests": {"koordinator.sh/batch-cpu": "500"},
                                         "limits": {"koordinator.sh/batch-cpu": "500"}}}
        ]),
        json!([{"name": "a", "containerID": "containerd://c1", "image": "", "imageID": "", "ready": true, "restartCount": 0},
               {"name": "b", "containerID": "docker://c2", "image": "", "imageID": "", "ready": true, "restartCount": 0}]),
    )]);
    let paths = KubeCgroupPaths::new(CgroupDriver::Cgroupfs);
    let plan = be_limits::decide(&pods, &paths, BeLimitsSettings::default());
    let pod_dir = format!("kubepods/besteffort/pod{uid}");
    assert_eq!(value_of(&plan, &pod_dir, "cpu.shares"), "1536");
    assert_eq!(value_of(&plan, &pod_dir, "cpu.cfs_quota_us"), "250000");
    // Container b has no batch-memory limit: the pod's memory is unlimited.
    assert_eq!(value_of(&plan, &pod_dir, "memory.limit_in_bytes"), "-1");
    let a = format!("{pod_dir}/c1");
    assert_eq!(value_of(&plan, &a, "cpu.shares"), "1024");
    assert_eq!(value_of(&plan, &a, "cpu.cfs_quota_us"), "200000");
    assert_eq!(
        value_of(&plan, &a, "memory.limit_in_bytes"),
        (2u64 << 30).to_string()
    );
    let b = format!("{pod_dir}/c2");
    assert_eq!(value_of(&plan, &b, "cpu.shares"), "512");
    assert_eq!(value_of(&plan, &b, "cpu.cfs_quota_us"), "50000");
    assert_eq!(value_of(&plan, &b, "memory.limit_in_bytes"), "-1");
    assert_eq!(plan.writes.len(), 9);

    // Suppress by cfsQuota: quotas are left to the besteffort parent.
    let plan = be_limits::decide(
        &pods,
        &paths,
        BeLimitsSettings {
            suppress_by_cfs_quota: true,
            ..BeLimitsSettings::default()
        },
    );
    assert!(
        plan.writes
            .iter()
            .filter(|w| w.file() == "cpu.cfs_quota_us")
            .all(|w| w.value.as_int() == Some(-1))
    );

    // Systemd paths.
    let plan = be_limits::decide(
        &pods,
        &KubeCgroupPaths::new(CgroupDriver::Systemd),
        BeLimitsSettings::default(),
    );
    assert!(plan.writes.iter().any(|w| w.cgroup.to_string()
        == "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podaaaaaaaa_0000_0000_0000_000000000001.slice/cri-containerd-c1.scope"));
}

#[test]
fn be_limits_boundaries_and_exclusions() {
    let paths = KubeCgroupPaths::new(CgroupDriver::Cgroupfs);
    let tiny = metas(vec![be_pod(
        "u1",
        json!([{"name": "a", "resources": {"requests": {"kubernetes.io/batch-cpu": "1"}, "limits": {"kubernetes.io/batch-cpu": "1"}}}]),
        json!([]),
    )]);
    let plan = be_limits::decide(&tiny, &paths, BeLimitsSettings::default());
    // 1 milli-core: shares clamp to 2, quota to the kernel minimum 1000.
    assert_eq!(value_of(&plan, "kubepods/besteffort/podu1", "cpu.shares"), "2");
    assert_eq!(
        value_of(&plan, "kubepods/besteffort/podu1", "cpu.cfs_quota_us"),
        "1000"
    );
    assert_eq!(plan.writes.len(), 3, "no container writes without a container ID");
    let huge = metas(vec![be_pod(
        "u2",
        json!([{"name": "a", "resources": {"requests": {"kubernetes.io/batch-cpu": "1000000"}}}]),
        json!([]),
    )]);
    let plan = be_limits::decide(&huge, &paths, BeLimitsSettings::default());
    assert_eq!(
        value_of(&plan, "kubepods/besteffort/podu2", "cpu.shares"),
        "262144"
    );
    assert_eq!(
        value_of(&plan, "kubepods/besteffort/podu2", "cpu.cfs_quota_us"),
        "-1"
    );
    // LS pods, unlabelled BestEffort pods and finished pods are left alone.
    let others = metas(vec![
        pod(
            json!({"metadata": {"name": "ls", "uid": "u3", "labels": {"koordinator.sh/qosClass": "LS"}}, "spec": {"containers": []}}),
        ),
        pod(json!({"metadata": {"name": "plain", "uid": "u4"}, "spec": {"containers": []}})),
        pod(
            json!({"metadata": {"name": "done", "uid": "u5", "labels": {"koordinator.sh/qosClass": "BE"}},
                   "spec": {"containers": []}, "status": {"phase": "Succeeded"}}),
        ),
    ]);
    assert!(
        be_limits::decide(&others, &paths, BeLimitsSettings::default())
            .writes
            .is_empty()
    );
    // A bad quantity skips the pod with a reason.
    let bad = metas(vec![be_pod(
        "u6",
        json!([{"name": "a", "resources": {"limits": {"kubernetes.io/batch-cpu": "lots"}}}]),
        json!([]),
    )]);
    let plan = be_limits::decide(&bad, &paths, BeLimitsSettings::default());
    assert!(plan.writes.is_empty());
    assert_eq!(plan.skipped.len(), 1);
}

/// The live path (decisions cached per pod, writes applied borrowed) still repairs a file
/// someone else changed, once the executor's forced refresh period is over, and follows a pod
/// whose limits change.
#[test]
fn cached_be_limits_are_refreshed_and_follow_pod_changes() {
    use std::time::{Duration, Instant};

    let host = common::FakeHost::new(CgroupVersion::V1, CgroupDriver::Cgroupfs);
    let be = |limit: &str| {
        metas(vec![be_pod(
            common::POD_UID,
            json!([{"name": "a", "resources": {"requests": {"kubernetes.io/batch-cpu": "2000"},
                                                "limits": {"kubernetes.io/batch-cpu": limit}}}]),
            json!([{"name": "a", "containerID": common::CONTAINER, "image": "", "imageID": "", "ready": true, "restartCount": 0}]),
        )])
    };
    let cgroups = Arc::new(Cgroups::detect(&host.roots).unwrap());
    let mut executor = koordlet::executor::Executor::new(
        cgroups,
        koordlet::executor::ExecutorConfig {
            force_refresh: Duration::from_secs(60),
            dry_run: false,
        },
    );
    let mut cache = be_limits::BeLimitsCache::new();
    let settings = BeLimitsSettings::default();
    let dir = host.paths.pod_dir(KubeQoSClass::BestEffort, &common::uid());
    let quota = || host.read("cpu", dir.as_path(), "cpu.cfs_quota_us");
    let t0 = Instant::now();
    let mut pods = be("500");
    let mut round = |pods: &[koordlet::states::PodMeta], at: u64| {
        let decided = cache.decide(pods, &host.paths, settings);
        let report = executor.apply_refs(decided.writes(), t0 + Duration::from_secs(at));
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        report
    };
    let r = round(&pods, 0);
    // Shares and quota at both levels; no memory limit is the file's value already.
    assert_eq!((r.changes.len(), r.skipped_unchanged), (4, 2));
    assert_eq!(quota(), "50000");

    // Someone else resets the quota: trusted while the cached value is fresh ...
    std::fs::write(host.file("cpu", dir.as_path(), "cpu.cfs_quota_us"), "-1").unwrap();
    let r = round(&pods, 30);
    assert_eq!(
        (r.skipped_cached, r.changes.len(), quota()),
        (6, 0, "-1".to_string())
    );
    // ... and repaired by the forced refresh.
    let r = round(&pods, 61);
    assert_eq!(r.changes.len(), 1);
    assert_eq!(
        (r.changes[0].old.as_str(), r.changes[0].new.as_str()),
        ("-1", "50000")
    );
    assert_eq!(quota(), "50000");

    // The pod's limit changes: the next round writes the new value.
    pods = be("1500");
    let r = round(&pods, 62);
    assert_eq!(quota(), "150000");
    assert_eq!(r.changes.len(), 2, "pod and container quota");
}

#[test]
fn be_limits_applied_on_v1_and_v2_trees() {
    for version in [CgroupVersion::V1, CgroupVersion::V2] {
        let host = common::FakeHost::new(version, CgroupDriver::Cgroupfs);
        let pods = metas(vec![be_pod(
            common::POD_UID,
            json!([{"name": "a", "resources": {"requests": {"kubernetes.io/batch-cpu": "2000"},
                                                "limits": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "1Gi"}}}]),
            json!([{"name": "a", "containerID": common::CONTAINER, "image": "", "imageID": "", "ready": true, "restartCount": 0}]),
        )]);
        let cgroups = Arc::new(Cgroups::detect(&host.roots).unwrap());
        let plan = be_limits::decide(&pods, &host.paths, BeLimitsSettings::default());
        let writes: Vec<_> = plan.writes.clone();
        let mut executor = koordlet::executor::Executor::new(cgroups, Default::default());
        let report = executor.apply(writes, std::time::Instant::now());
        assert!(report.errors.is_empty(), "{version:?}: {:?}", report.errors);
        let pod_dir = host.paths.pod_dir(KubeQoSClass::BestEffort, &common::uid());
        let dir = pod_dir.as_path();
        match version {
            CgroupVersion::V1 => {
                assert_eq!(host.read("cpu", dir, "cpu.shares"), "2048");
                assert_eq!(host.read("cpu", dir, "cpu.cfs_quota_us"), "50000");
                assert_eq!(
                    host.read("memory", dir, "memory.limit_in_bytes"),
                    (1u64 << 30).to_string()
                );
            }
            CgroupVersion::V2 => {
                // shares 2048 -> weight 1 + (2046 × 9999 / 262142) = 79.
                assert_eq!(host.read("", dir, "cpu.weight"), "79");
                assert_eq!(host.read("", dir, "cpu.max"), "50000 100000");
                assert_eq!(host.read("", dir, "memory.max"), (1u64 << 30).to_string());
            }
        }
    }
}

#[test]
fn report_status_from_stores_with_a_fake_clock() {
    let mut stores = Stores::default();
    let t0 = 1_700_000_000_000i64;
    let uid = "u1";
    // 10 minutes at 1 s: node CPU 1..=10 cores repeating, pod CPU 0.5, memory constant.
    for i in 0..600i64 {
        let t = MetricTime(t0 + i * 1000);
        stores
            .node
            .append(&SeriesKey::node(MetricKind::NodeCpuUsage), t, (i % 10 + 1) as f64)
            .unwrap();
        stores
            .node
            .append(&SeriesKey::node(MetricKind::NodeMemoryUsage), t, 4e9)
            .unwrap();
        stores
            .node
            .append(&SeriesKey::node(MetricKind::SysCpuUsage), t, 0.25)
            .unwrap();
        stores
            .node
            .append(&SeriesKey::node(MetricKind::SysMemoryUsage), t, 1e9)
            .unwrap();
        stores
            .pods
            .append(&SeriesKey::of(MetricKind::PodCpuUsage, uid), t, 0.5)
            .unwrap();
        stores
            .pods
            .append(&SeriesKey::of(MetricKind::PodMemoryUsage, uid), t, 2e8)
            .unwrap();
    }
    let now = MetricTime(t0 + 599 * 1000);
    let pods = metas(vec![pod(
        json!({"metadata": {"name": "web", "namespace": "default", "uid": uid,
        "labels": {"koordinator.sh/qosClass": "LS"}}, "spec": {"containers": []}}),
    )]);
    let settings = NodeMetricSettings::default();
    let status = build_status(&ReportInput {
        node_store: &stores.node,
        pod_store: &stores.pods,
        pods: &pods,
        host_applications: &[],
        settings: &settings,
        now,
        prod_reclaimable: None,
        prod_peak: None,
    });
    let node = status.node_metric.as_ref().unwrap();
    // Last 300 s inclusive = 301 samples of the 1..=10 cycle: avg ≈ 5.5 cores.
    let cpu = &node.node_usage.resources["cpu"].0;
    let milli: i64 = cpu.trim_end_matches('m').parse().unwrap();
    assert!((5400..=5600).contains(&milli), "{cpu}");
    assert_eq!(node.node_usage.resources["memory"].0, "4000000000");
    assert_eq!(node.system_usage.resources["cpu"].0, "250m");
    let aggregated = node.aggregated_node_usages.as_ref().unwrap();
    assert_eq!(aggregated.len(), 3);
    // 5m window: warm; p90 of the 1..=10 cycle is 9 cores, p99 10 cores.
    let five = &aggregated[0];
    assert_eq!(five.duration.as_deref(), Some("5m"));
    assert_eq!(five.get("p90").unwrap().resources["cpu"].0, "9000m");
    assert_eq!(five.get("p99").unwrap().resources["cpu"].0, "10000m");
    assert_eq!(five.get("p50").unwrap().resources["memory"].0, "4000000000");
    // 10m window: 599 s of data ≥ half of it: warm. 30m: 599 s < 15 min: cold, empty.
    assert!(!aggregated[1].usage.is_empty());
    assert!(aggregated[2].usage.is_empty());
    assert_eq!(aggregated[2].duration.as_deref(), Some("30m"));
    let pods_metric = status.pods_metric.as_ref().unwrap();
    assert_eq!(pods_metric.len(), 1);
    assert_eq!(pods_metric[0].pod_usage.resources["cpu"].0, "500m");
    assert_eq!(pods_metric[0].qos.as_deref(), Some("LS"));
    assert_eq!(pods_metric[0].priority.as_deref(), Some("koord-prod"));
    assert!(status.update_time.is_some());
}

#[test]
fn plan_golden() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/plan_node.yaml"
    ))
    .unwrap();
    let input = parse_input(&text).unwrap();
    let options = PlanOptions {
        version: CgroupVersion::V1,
        driver: CgroupDriver::Cgroupfs,
        cgroups: None,
        gates: Default::default(),
        collect_interval_seconds: 1.0,
        system_files: None,
    };
    let out = plan(&input, &options);
    let golden: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/plan_node.golden.json"
        ))
        .unwrap(),
    )
    .unwrap();
    pretty_assertions::assert_eq!(out, golden);
    // v2 names and values from the same decision.
    let v2 = plan(
        &input,
        &PlanOptions {
            version: CgroupVersion::V2,
            ..options
        },
    );
    let writes = v2["writes"].as_array().unwrap();
    assert!(
        writes
            .iter()
            .any(|w| w["file"] == "cpu.max" && w["value"] == "250000 100000")
    );
    assert!(
        writes
            .iter()
            .any(|w| w["file"] == "memory.max" && w["value"] == "2684354560")
    );
    // shares 1536 -> weight 1 + 1534 × 9999 / 262142 = 59.
    assert!(
        writes
            .iter()
            .any(|w| w["file"] == "cpu.weight" && w["value"] == "59")
    );
}

#[test]
fn plan_errors_name_the_document_and_field() {
    let err =
        parse_input("kind: Node\nmetadata: {name: n}\n---\nkind: Pod\nmetadata: {name: [1]}\n").unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("document 2 (Pod)") && text.contains("metadata.name"),
        "{text}"
    );
    let err = parse_input("kind: Deployment\n").unwrap_err();
    assert!(err.to_string().contains("document 1 (Deployment)"));
    assert!(
        parse_input("kind: Pod\nmetadata: {name: p}\n")
            .unwrap_err()
            .to_string()
            .contains("no Node")
    );
    assert!(parse_input("{{{").is_err());
}

#[test]
fn collector_reads_pods_and_drops_vanished_ones() {
    let host = common::FakeHost::new(CgroupVersion::V1, CgroupDriver::Cgroupfs);
    std::fs::write(host.roots.proc.join("stat"), "cpu  100 0 100 1000 0 0 0 0 0 0\n").unwrap();
    std::fs::write(
        host.roots.proc.join("meminfo"),
        "MemTotal: 1000 kB\nMemFree: 200 kB\nMemAvailable: 600 kB\n",
    )
    .unwrap();
    let cgroups = Arc::new(Cgroups::detect(&host.roots).unwrap());
    let mut collector = Collector::new(cgroups, host.roots.clone(), host.paths.clone());
    let mut stores = Stores::default();
    let pods = metas(vec![be_pod(
        common::POD_UID,
        json!([{"name": "a"}]),
        json!([{"name": "a", "containerID": common::CONTAINER, "image": "", "imageID": "", "ready": true, "restartCount": 0}]),
    )]);
    let mut snapshot = Snapshot {
        pods: Arc::new(pods),
        pods_synced: true,
        ..Snapshot::default()
    };
    let t0 = 1_700_000_000_000i64;
    collector.collect(&snapshot, MetricTime(t0), &mut stores);
    // One second later: node +200 ticks (2 cores), pod cgroup +1 s of CPU (1 core).
    std::fs::write(host.roots.proc.join("stat"), "cpu  200 0 200 1000 0 0 0 0 0 0\n").unwrap();
    let pod_dir = host.paths.pod_dir(KubeQoSClass::BestEffort, &common::uid());
    std::fs::write(
        host.file("cpuacct", pod_dir.as_path(), "cpuacct.usage"),
        "6000000000\n",
    )
    .unwrap();
    let summary = collector.collect(&snapshot, MetricTime(t0 + 1000), &mut stores);
    assert_eq!(summary.read_errors, 0);
    let latest = |s: &koordlet::metrics::MetricStore, k: SeriesKey| s.latest(&k).map(|(_, v)| v);
    assert_eq!(
        latest(&stores.node, SeriesKey::node(MetricKind::NodeCpuUsage)),
        Some(2.0)
    );
    assert_eq!(
        latest(
            &stores.pods,
            SeriesKey::of(MetricKind::PodCpuUsage, common::POD_UID)
        ),
        Some(1.0)
    );
    assert_eq!(
        latest(&stores.node, SeriesKey::node(MetricKind::SysCpuUsage)),
        Some(1.0)
    );
    assert_eq!(
        latest(&stores.node, SeriesKey::node(MetricKind::BeCpuUsage)),
        Some(1.0)
    );
    assert_eq!(
        latest(&stores.node, SeriesKey::node(MetricKind::NodeMemoryUsage)),
        Some(400.0 * 1024.0)
    );
    // Working set: usage 1 MiB − inactive_file 3.
    assert_eq!(
        latest(
            &stores.pods,
            SeriesKey::of(MetricKind::PodMemoryUsage, common::POD_UID)
        ),
        Some(1048573.0)
    );
    assert!(stores.pods.series_count() >= 3);
    // The pod goes away (the kubelet reports other pods): its series are dropped.
    snapshot.pods = Arc::new(metas(vec![pod(
        json!({"metadata": {"name": "x", "uid": "other"}, "spec": {"containers": []}}),
    )]));
    let summary = collector.collect(&snapshot, MetricTime(t0 + 2000), &mut stores);
    assert_eq!(summary.dropped_objects, 2);
    assert!(
        latest(
            &stores.pods,
            SeriesKey::of(MetricKind::PodCpuUsage, common::POD_UID)
        )
        .is_none()
    );
    assert_eq!(collector.tracked_objects(), 0, "the other pod has no cgroup");
}
