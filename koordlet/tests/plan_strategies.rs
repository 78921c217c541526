//! `koordlet plan` over the seeds' scenarios: every strategy's decision from one YAML file.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use koordlet::plan::{PlanOptions, parse_input, plan};
use koordlet::system::{CgroupDriver, CgroupVersion};
use koordlet_core::features::FeatureGates;
use serde_json::Value;

fn run(fixture: &str, gates: &str) -> Value {
    let text =
        std::fs::read_to_string(format!("{}/tests/fixtures/{fixture}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let input = parse_input(&text).unwrap();
    plan(
        &input,
        &PlanOptions {
            version: CgroupVersion::V1,
            driver: CgroupDriver::Cgroupfs,
            cgroups: None,
            gates: FeatureGates::parse(gates).unwrap(),
            collect_interval_seconds: 1.0,
            system_files: None,
        },
    )
}

fn names(v: &Value) -> Vec<&str> {
    v["evictions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect()
}

#[test]
fn seed001_node_memory_over_threshold_evicts_the_be_pod_with_most_memory() {
    let out = run("plan_seed001_memory.yaml", "BEMemoryEvict=true");
    // 24Gi of 32Gi = 75 % >= 70 %: release down to 68 % = 2.24 Gi; be-big (3 Gi) covers it.
    assert_eq!(names(&out), ["be-big"]);
    let e = &out["evictions"][0];
    assert_eq!(e["namespace"], "batch");
    assert_eq!(e["uid"], "33333333-0000-0000-0000-000000000003");
    assert_eq!(e["strategy"], "memory_evict");
    assert_eq!(e["reason"], "EvictPodByNodeMemoryUsage");
    assert!(
        e["message"].as_str().unwrap().contains("75% >= threshold 70%"),
        "{e}"
    );
    let m = &out["strategies"]["memory_evict"];
    assert_eq!(
        (m["usage_percent"].as_i64(), m["lower_percent"].as_i64()),
        (Some(75), Some(68))
    );
    assert_eq!(m["release_bytes"], 32u64 * (1 << 30) * 7 / 100);
    // Every strategy is reported; the gated-off ones say why.
    assert_eq!(
        out["strategies"]["cpu_evict"]["skipped"],
        "feature gate BECPUEvict is off"
    );
    assert_eq!(
        out["strategies"]["cpu_burst"]["skipped"],
        "no cpuBurstStrategy in the NodeSLO"
    );
    assert!(out["strategies"]["be_limits"]["pods"].is_array());
    assert!(out["strategies"]["cpu_suppress"]["budget"].is_object());
    // Upstream default gates: memory eviction off, nothing evicted.
    assert!(names(&run("plan_seed001_memory.yaml", "")).is_empty());
}

#[test]
fn seed002_low_satisfaction_evicts_the_busiest_be_pods() {
    let out = run("plan_seed002_satisfaction.yaml", "BECPUEvict=true");
    let c = &out["strategies"]["cpu_evict"];
    // Limit 8 CPUs / requests 16 cores = 0.5 <= 0.6, usage 7.6 of 8 = 95 % >= 90 %.
    assert_eq!(c["satisfaction"], 0.5);
    assert_eq!(c["release_milli"], 4800); // 16000 × (0.8 − 0.5)
    assert_eq!(names(&out), ["be-pod-a", "be-pod-d"]);
    assert!(
        out["evictions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["reason"] == "EvictPodByBECPUSatisfaction")
    );
}

#[test]
fn seed000_pod_level_burst_strategies() {
    let out = run("plan_seed000_burst.yaml", "");
    let pods = out["strategies"]["cpu_burst"]["pods"].as_array().unwrap();
    let source = |name: &str| {
        pods.iter()
            .find(|p| p["name"] == name)
            .map(|p| {
                (
                    p["source"].as_str().unwrap().to_owned(),
                    p["pod_burst_us"].as_i64().unwrap(),
                )
            })
            .unwrap()
    };
    // overridePod=true beats the pod's annotation (policy none): 2 cores × 100 %.
    assert_eq!(
        source("payment"),
        (
            "podStrategies[0] (overridePod=true, with annotation)".into(),
            200_000
        )
    );
    // No match: the node strategy (200 %, clamped to the 2-core quota).
    assert_eq!(source("web"), ("node".into(), 200_000));
    // Second strategy: cpuBurstOnly 50 %.
    assert_eq!(
        source("low"),
        ("podStrategies[1] (overridePod=false)".into(), 100_000)
    );
    let writes = out["writes"].as_array().unwrap();
    let pay = writes
        .iter()
        .filter(|w| w["cgroup"].as_str().unwrap().contains("pod55555551") && w["file"] == "cpu.cfs_burst_us")
        .count();
    assert_eq!(pay, 2, "pod and container of payment: {writes:?}");
}

#[test]
fn missing_usage_skips_with_reasons_instead_of_guessing() {
    let text = std::fs::read_to_string(format!(
        "{}/tests/fixtures/plan_seed001_memory.yaml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    // Drop the NodeMetric document: no usage at all.
    let docs: Vec<&str> = text
        .split("\n---\n")
        .filter(|d| !d.contains("kind: NodeMetric"))
        .collect();
    let input = parse_input(&docs.join("\n---\n")).unwrap();
    let out = plan(
        &input,
        &PlanOptions {
            version: CgroupVersion::V2,
            driver: CgroupDriver::Systemd,
            cgroups: None,
            gates: FeatureGates::parse("BEMemoryEvict=true,BECPUEvict=true").unwrap(),
            collect_interval_seconds: 1.0,
            system_files: None,
        },
    );
    assert!(names(&out).is_empty());
    let s = &out["strategies"];
    assert_eq!(s["cpu_suppress"]["skipped"], "node CPU usage not measured yet");
    assert_eq!(s["memory_evict"]["action"], "skipped");
    assert_eq!(s["memory_evict"]["reason"], "node memory usage not measured yet");
    assert_eq!(s["cpu_evict"]["action"], "skipped");
    // be_limits still runs, with systemd paths and v2 files.
    let writes = out["writes"].as_array().unwrap();
    assert!(
        writes
            .iter()
            .any(|w| w["file"] == "memory.max"
                && w["cgroup"].as_str().unwrap().contains("kubepods-besteffort")),
        "{writes:?}"
    );
}

#[test]
fn suppress_budget_in_plan_subtracts_non_be_host_applications() {
    let text = std::fs::read_to_string(format!(
        "{}/tests/fixtures/plan_seed001_memory.yaml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let options = PlanOptions {
        version: CgroupVersion::V1,
        driver: CgroupDriver::Cgroupfs,
        cgroups: None,
        gates: FeatureGates::parse("BECPUSuppress=true").unwrap(),
        collect_interval_seconds: 1.0,
        system_files: None,
    };
    let budget = |input: &koordlet::plan::PlanInput| {
        plan(input, &options)["strategies"]["cpu_suppress"]["budget"].clone()
    };
    let mut input = parse_input(&text).unwrap();
    let without = budget(&input);
    assert_eq!(without["host_app_non_be_milli"], 0, "{without}");

    // A non-BE host application using 600m, and a BE one (besteffort cgroup) using 300m.
    let slo = input.node_slo.as_mut().unwrap();
    slo.spec.host_applications = Some(
        serde_json::from_value(serde_json::json!([
            {"name": "nginx", "qos": "LS", "cgroupPath": {"base": "CgroupRoot", "relativePath": "nginx/"}},
            {"name": "spark-shuffle", "qos": "BE",
             "cgroupPath": {"base": "KubepodsBesteffort", "relativePath": "shuffle/"}}
        ]))
        .unwrap(),
    );
    let status = input.node_metric.as_mut().unwrap().status.as_mut().unwrap();
    status.host_application_metric = Some(
        serde_json::from_value(serde_json::json!([
            {"name": "nginx", "usage": {"resources": {"cpu": "600m", "memory": "1Gi"}}, "qos": "LS"},
            {"name": "spark-shuffle", "usage": {"resources": {"cpu": "300m", "memory": "1Gi"}}, "qos": "BE"}
        ]))
        .unwrap(),
    );
    let with = budget(&input);
    assert_eq!(with["host_app_non_be_milli"], 600, "{with}");
}
