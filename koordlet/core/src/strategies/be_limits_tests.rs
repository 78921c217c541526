use super::*;
use crate::CgroupDriver;
use k8s_openapi::api::core::v1::Pod;

fn pod(uid: &str, batch_cpu_limit: &str, phase: &str) -> PodMeta {
    let value = serde_json::json!({
        "metadata": {"name": format!("p-{uid}"), "namespace": "ns", "uid": uid,
                     "labels": {"koordinator.sh/qosClass": "BE"}},
        "spec": {"containers": [
            {"name": "a", "resources": {
                "requests": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "1Gi"},
                "limits": {"kubernetes.io/batch-cpu": batch_cpu_limit, "kubernetes.io/batch-memory": "2Gi"}}},
            {"name": "b", "resources": {"limits": {"kubernetes.io/batch-cpu": "500"}}}
        ]},
        "status": {"qosClass": "BestEffort", "phase": phase, "containerStatuses": [
            {"name": "a", "containerID": format!("containerd://{uid}0a"), "image": "", "imageID": "",
             "ready": true, "restartCount": 0},
            {"name": "b", "containerID": format!("containerd://{uid}0b"), "image": "", "imageID": "",
             "ready": true, "restartCount": 0}
        ]}
    });
    let pod: Pod = serde_json::from_value(value).unwrap();
    PodMeta::new(Arc::new(pod)).unwrap()
}

fn bad_pod(uid: &str) -> PodMeta {
    let value = serde_json::json!({
        "metadata": {"name": "bad", "namespace": "ns", "uid": uid,
                     "labels": {"koordinator.sh/qosClass": "BE"}},
        "spec": {"containers": [{"name": "a", "resources": {"limits": {"kubernetes.io/batch-cpu": "x"}}}]},
        "status": {"phase": "Running"}
    });
    PodMeta::new(Arc::new(serde_json::from_value::<Pod>(value).unwrap())).unwrap()
}

fn ls_pod(uid: &str) -> PodMeta {
    let value = serde_json::json!({
        "metadata": {"name": "ls", "namespace": "ns", "uid": uid,
                     "labels": {"koordinator.sh/qosClass": "LS"}},
        "spec": {"containers": [{"name": "a"}]},
        "status": {"phase": "Running"}
    });
    PodMeta::new(Arc::new(serde_json::from_value::<Pod>(value).unwrap())).unwrap()
}

fn paths() -> KubeCgroupPaths {
    KubeCgroupPaths::new(CgroupDriver::Cgroupfs)
}

/// The cached round gives exactly `decide`'s plan, and its executor writes are the plan's
/// writes converted.
fn check_same(round: &BeLimitsRound, pods: &[PodMeta], paths: &KubeCgroupPaths, settings: BeLimitsSettings) {
    let plan = decide(pods, paths, settings);
    assert_eq!(round.plan(), plan);
    assert_eq!(round.writes().cloned().collect::<Vec<_>>(), plan.writes);
    assert_eq!(round.has_no_writes(), plan.writes.is_empty());
}

#[test]
fn unchanged_pods_are_reused_and_match_decide() {
    let pods = vec![
        pod("u1", "1000", "Running"),
        ls_pod("u2"),
        bad_pod("u3"),
        pod("u4", "250", "Running"),
    ];
    let (paths, settings) = (paths(), BeLimitsSettings::default());
    let mut cache = BeLimitsCache::new();
    let round = cache.decide(&pods, &paths, settings);
    check_same(&round, &pods, &paths, settings);
    assert_eq!(round.skipped().count(), 1);
    assert_eq!(
        (cache.computed(), cache.len()),
        (3, 3),
        "BE pods only, skipped ones too"
    );

    let again = cache.decide(&pods, &paths, settings);
    assert_eq!(again, round);
    assert_eq!(cache.computed(), 3, "nothing recomputed");

    // The pod list re-fetched: equal pods in new objects are still reused.
    let refetched: Vec<PodMeta> = pods
        .iter()
        .map(|m| PodMeta::new(Arc::new(Pod::clone(&m.pod))).unwrap())
        .collect();
    let round = cache.decide(&refetched, &paths, settings);
    check_same(&round, &refetched, &paths, settings);
    assert_eq!(cache.computed(), 3);
}

#[test]
fn a_changed_pod_is_recomputed() {
    let (paths, settings) = (paths(), BeLimitsSettings::default());
    let mut cache = BeLimitsCache::new();
    let mut pods = vec![pod("u1", "1000", "Running"), pod("u2", "1000", "Running")];
    cache.decide(&pods, &paths, settings);
    assert_eq!(cache.computed(), 2);

    // New limit on u1: recomputed, u2 reused.
    pods[0] = pod("u1", "2000", "Running");
    let round = cache.decide(&pods, &paths, settings);
    check_same(&round, &pods, &paths, settings);
    assert_eq!(cache.computed(), 3);
    assert_eq!(
        round.pods().next().map(|p| p.cfs_quota_us),
        Some(250_000),
        "2000m + 500m"
    );

    // A container got (another) ID: its cgroup changed, so recomputed.
    let mut changed = Pod::clone(&pods[1].pod);
    if let Some(statuses) = changed
        .status
        .as_mut()
        .and_then(|s| s.container_statuses.as_mut())
    {
        statuses[1].container_id = Some("containerd://ffff".into());
    }
    pods[1] = PodMeta::new(Arc::new(changed)).unwrap();
    let round = cache.decide(&pods, &paths, settings);
    check_same(&round, &pods, &paths, settings);
    assert_eq!(cache.computed(), 4);
    assert!(round.writes().any(|w| w.cgroup.as_path().ends_with("ffff")));

    // A finished pod leaves the plan and the cache.
    pods[1] = pod("u2", "1000", "Succeeded");
    let round = cache.decide(&pods, &paths, settings);
    check_same(&round, &pods, &paths, settings);
    assert_eq!((cache.computed(), cache.len()), (4, 1));
}

#[test]
fn settings_or_layout_change_recomputes_everything() {
    let paths = paths();
    let mut cache = BeLimitsCache::new();
    let pods = vec![pod("u1", "1000", "Running"), pod("u2", "500", "Running")];
    cache.decide(&pods, &paths, BeLimitsSettings::default());
    assert_eq!(cache.computed(), 2);

    // The NodeSLO turns on suppress by cfsQuota: every quota becomes -1.
    let suppress = BeLimitsSettings {
        suppress_by_cfs_quota: true,
        ..BeLimitsSettings::default()
    };
    let round = cache.decide(&pods, &paths, suppress);
    check_same(&round, &pods, &paths, suppress);
    assert_eq!(cache.computed(), 4);
    assert!(round.pods().all(|p| p.cfs_quota_us == -1));

    // And off again.
    let round = cache.decide(&pods, &paths, BeLimitsSettings::default());
    check_same(&round, &pods, &paths, BeLimitsSettings::default());
    assert_eq!(cache.computed(), 6);
    assert!(round.pods().all(|p| p.cfs_quota_us > 0));

    // The manager gives the node a CPU normalization ratio: quotas shrink, shares do not.
    let normalized = BeLimitsSettings {
        cpu_normalization: koord_api::cpu_normalization::NormalizationRatio::parse("1.50").unwrap(),
        ..BeLimitsSettings::default()
    };
    let round = cache.decide(&pods, &paths, normalized);
    check_same(&round, &pods, &paths, normalized);
    assert_eq!(cache.computed(), 8);
    let quotas: Vec<(i64, i64)> = round.pods().map(|p| (p.cfs_quota_us, p.cpu_shares)).collect();
    // Pod limits 1500 and 1000 milli: 150000 µs / 1.5 = 100000; ceil(100000 / 1.5) = 66667.
    assert_eq!(quotas, [(100_000, 512), (66_667, 512)]);
    let round = cache.decide(&pods, &paths, BeLimitsSettings::default());
    assert!(round.pods().all(|p| p.cfs_quota_us % 50_000 == 0));

    // Another cgroup driver: other directories.
    let systemd = KubeCgroupPaths::new(CgroupDriver::Systemd);
    let round = cache.decide(&pods, &systemd, BeLimitsSettings::default());
    check_same(&round, &pods, &systemd, BeLimitsSettings::default());
    assert_eq!(cache.computed(), 12);
}

#[test]
fn removed_pods_are_dropped() {
    let (paths, settings) = (paths(), BeLimitsSettings::default());
    let mut cache = BeLimitsCache::new();
    let pods = vec![
        pod("u1", "1000", "Running"),
        pod("u2", "1000", "Running"),
        bad_pod("u3"),
    ];
    cache.decide(&pods, &paths, settings);
    assert_eq!(cache.len(), 3);
    let round = cache.decide(&pods[1..2], &paths, settings);
    check_same(&round, &pods[1..2], &paths, settings);
    assert_eq!(cache.len(), 1);
    // Back again: computed anew.
    cache.decide(&pods, &paths, settings);
    assert_eq!((cache.computed(), cache.len()), (5, 3));
    let round = cache.decide(&[], &paths, settings);
    assert!(round.has_no_writes() && cache.is_empty());
}

#[test]
fn a_uid_listed_twice_is_decided_like_decide_does() {
    let (paths, settings) = (paths(), BeLimitsSettings::default());
    let mut cache = BeLimitsCache::new();
    let pods = vec![pod("u1", "1000", "Running"), pod("u1", "2000", "Running")];
    for _ in 0..2 {
        let round = cache.decide(&pods, &paths, settings);
        check_same(&round, &pods, &paths, settings);
    }
}
