use std::sync::Arc;

use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::CgroupDriver;
use crate::resource::CgroupValue;

const MI: i64 = 1 << 20;
const GI: i64 = 1 << 30;
/// 80 % of 1Gi in whole pages.
const GI_80: i64 = GI * 4 / 5 / PAGE_SIZE * PAGE_SIZE;

fn pod(name: &str, qos: &str, resources: serde_json::Value, annotations: serde_json::Value) -> PodMeta {
    let uid = format!("00000000-0000-0000-0000-{:0>12}", name.len());
    let hex: String = name.bytes().map(|b| format!("{b:02x}")).collect();
    let v = json!({
        "metadata": {"name": name, "namespace": "default", "uid": uid,
                     "labels": {"koordinator.sh/qosClass": qos}, "annotations": annotations},
        "spec": {"containers": [{"name": "c", "resources": resources}]},
        "status": {"phase": "Running",
                   "containerStatuses": [{"name": "c", "containerID": format!("containerd://{hex:0>64}"),
                                          "image": "", "imageID": "", "ready": true, "restartCount": 0}]}
    });
    PodMeta::new(Arc::new(serde_json::from_value(v).unwrap())).unwrap()
}

fn strategy(v: serde_json::Value) -> ResourceQosStrategy {
    serde_json::from_value(v).unwrap()
}

fn enabled_ls(min: i64, low: i64, throttling: i64) -> ResourceQosStrategy {
    strategy(json!({
        "lsClass": {"memoryQOS": {"enable": true, "minLimitPercent": min,
                                  "lowLimitPercent": low, "throttlingPercent": throttling}},
        "beClass": {"memoryQOS": {"enable": true, "minLimitPercent": 0,
                                  "lowLimitPercent": 0, "throttlingPercent": 80}}
    }))
}

fn run(s: &ResourceQosStrategy, pods: &[PodMeta]) -> MemoryQosPlan {
    decide(&MemoryQosInput {
        strategy: s,
        pods,
        paths: &KubeCgroupPaths::new(CgroupDriver::Cgroupfs),
        allocatable_memory_bytes: 16 * GI,
    })
}

fn value(plan: &MemoryQosPlan, dir_suffix: &str, r: CgroupResource) -> i64 {
    let w = plan
        .writes
        .iter()
        .find(|w| w.resource == r && w.cgroup.to_string().ends_with(dir_suffix))
        .unwrap_or_else(|| panic!("no {r} write for {dir_suffix}"));
    match w.value {
        CgroupValue::Int(v) => v,
        CgroupValue::Cpus(_) => panic!("not an int"),
    }
}

#[test]
fn upstream_formulas_at_pod_and_container_level() {
    // LS (Burstable): request 1Gi, limit 2Gi; min 50 %, low 80 %, throttling 60 %.
    let ls = pod(
        "ls",
        "LS",
        json!({"requests": {"memory": "1Gi"}, "limits": {"memory": "2Gi"}}),
        json!({}),
    );
    let plan = run(&enabled_ls(50, 80, 60), std::slice::from_ref(&ls));
    let p = &plan.pods[0];
    assert_eq!((p.request_bytes, p.min, p.low), (GI, GI / 2, GI_80));
    assert_eq!(p.source, "class LS");
    let c = &p.containers[0];
    // high = floor((1Gi + 1Gi × 0.6) / 4096) × 4096.
    let raw = GI + GI * 60 / 100;
    assert_eq!(c.high, raw / PAGE_SIZE * PAGE_SIZE);
    assert_eq!((c.min, c.low), (GI / 2, GI_80));
    // Writes: kubepods (Σ all), burstable (Σ), besteffort (0), then the pod and its container.
    let pod_dir = ls
        .cgroup_dir(&KubeCgroupPaths::new(CgroupDriver::Cgroupfs))
        .to_string();
    assert_eq!(value(&plan, "kubepods", CgroupResource::MemoryMin), GI / 2);
    assert_eq!(
        value(&plan, "kubepods/burstable", CgroupResource::MemoryLow),
        GI_80
    );
    assert_eq!(value(&plan, "kubepods/besteffort", CgroupResource::MemoryMin), 0);
    assert_eq!(value(&plan, &pod_dir, CgroupResource::MemoryMin), GI / 2);
    assert!(
        !plan
            .writes
            .iter()
            .any(|w| w.cgroup.to_string() == pod_dir && w.resource == CgroupResource::MemoryHigh),
        "no memory.high at pod level"
    );
    let first_pod_write = plan
        .writes
        .iter()
        .position(|w| w.cgroup.to_string() == pod_dir)
        .unwrap();
    assert_eq!(first_pod_write, 6, "QoS directories first");
    assert!(plan.writes.iter().all(|w| w.strategy == STRATEGY));
}

/// (class min, low, throttling, request, limit) -> (min, low, high)
type Case = (i64, i64, i64, &'static str, Option<&'static str>, (i64, i64, i64));

#[test]
fn table_of_edge_cases() {
    let cases: [Case; 6] = [
        // low below min is raised to min.
        (80, 20, 0, "100Mi", Some("200Mi"), (80 * MI, 80 * MI, -1)),
        // low 0 stays 0 (no protection), throttling 0 is `max`.
        (50, 0, 0, "100Mi", Some("200Mi"), (50 * MI, 0, -1)),
        // throttling 100 % is the limit itself.
        (0, 0, 100, "100Mi", Some("200Mi"), (0, 0, 200 * MI)),
        // no limit: the node's allocatable memory (16Gi).
        (0, 0, 50, "1Gi", None, (0, 0, GI + 15 * GI / 2)),
        // out-of-range percents are clamped to 0..=100.
        (150, -5, 0, "100Mi", Some("200Mi"), (100 * MI, 0, -1)),
        // high never below min: throttling 1 % on a request-sized limit.
        (
            100,
            100,
            1,
            "100Mi",
            Some("100Mi"),
            (100 * MI, 100 * MI, 100 * MI),
        ),
    ];
    for (min_p, low_p, thr, req, limit, expected) in cases {
        let mut res = json!({"requests": {"memory": req}});
        if let Some(l) = limit {
            res["limits"] = json!({"memory": l});
        }
        let ls = pod("ls", "LS", res, json!({}));
        let plan = run(&enabled_ls(min_p, low_p, thr), &[ls]);
        let c = &plan.pods[0].containers[0];
        assert_eq!(
            (c.min, c.low, c.high),
            expected,
            "{min_p} {low_p} {thr} {req} {limit:?}"
        );
    }
}

#[test]
fn disabled_class_and_annotation_none_reset_protection() {
    let res = json!({"requests": {"memory": "1Gi"}, "limits": {"memory": "2Gi"}});
    // The LSR class is not enabled: reset (min 0, low 0, high max).
    let lsr = pod("lsr", "LSR", res.clone(), json!({}));
    // Enabled class, but the pod opts out.
    let opted_out = pod(
        "opted-out",
        "LS",
        res.clone(),
        json!({"koordinator.sh/memoryQOS": "{\"policy\":\"none\"}"}),
    );
    // A policy `default` keeps the class.
    let default = pod(
        "default",
        "LS",
        res,
        json!({"koordinator.sh/memoryQOS": "{\"policy\":\"default\"}"}),
    );
    let plan = run(&enabled_ls(50, 50, 50), &[lsr, opted_out, default]);
    let by = |n: &str| {
        plan.pods
            .iter()
            .find(|p| p.pod == format!("default/{n}"))
            .unwrap()
    };
    assert_eq!(by("lsr").source, "class LSR (disabled)");
    assert_eq!(by("opted-out").source, "annotation none");
    for p in [by("lsr"), by("opted-out")] {
        assert_eq!((p.min, p.low), (0, 0));
        assert_eq!(p.containers[0].high, -1);
    }
    assert_eq!(by("default").min, GI / 2);
}

#[test]
fn be_pods_use_batch_memory() {
    let be = pod(
        "be",
        "BE",
        json!({"requests": {"kubernetes.io/batch-memory": "1Gi"},
               "limits": {"kubernetes.io/batch-memory": "2Gi"}}),
        json!({}),
    );
    let plan = run(&enabled_ls(0, 0, 0), &[be]);
    let p = &plan.pods[0];
    assert_eq!(p.request_bytes, GI);
    // BE class: throttling 80 %: 1Gi + 0.8Gi.
    assert_eq!(p.containers[0].high, (GI + GI * 4 / 5) / PAGE_SIZE * PAGE_SIZE);
}

proptest! {
    /// Whatever the config and resources: 0 ≤ min ≤ low-or-0, min ≤ high ≤ limit (or max),
    /// high page-aligned unless it equals min, and the QoS sums cover every pod.
    #[test]
    fn ranges_hold(
        min_p in -50i64..200, low_p in -50i64..200, thr in -50i64..200,
        req in 0i64..(64 * GI), extra in 0i64..(64 * GI), limited in any::<bool>(),
    ) {
        let limit = req + extra;
        let (min, low) = min_low(req, min_p, low_p);
        prop_assert!(0 <= min && min <= req);
        prop_assert!(low == 0 || (min <= low && low <= req));
        prop_assert!(min % PAGE_SIZE == 0 && low % PAGE_SIZE == 0);
        let effective_limit = if limited && limit > 0 { limit } else { 16 * GI };
        let h = high(req, effective_limit, thr, min);
        if h != -1 {
            prop_assert!(min <= h);
            prop_assert!(h <= effective_limit.max(min));
            prop_assert!(h == min || h % PAGE_SIZE == 0);
        } else {
            prop_assert!(thr <= 0 || effective_limit <= 0);
        }
    }
}
