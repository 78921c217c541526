#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::sync::Arc;

use koord_api::NodeSLOSpec;
use serde_json::json;

use super::*;
use crate::features::FeatureGates;
use crate::resource::CgroupValue;
use crate::strategies::engine::{
    self, CgroupFacts, EngineInput, EngineOptions, EngineState, NodeFacts, UsageFacts,
};
use crate::{CgroupDriver, KubeCgroupPaths};

/// A running pod with koord class `qos` ("" for none) in kube QoS `kube`.
fn pod(name: &str, qos: &str, kube: &str) -> PodMeta {
    pod_in_phase(name, qos, kube, "Running")
}

fn pod_in_phase(name: &str, qos: &str, kube: &str, phase: &str) -> PodMeta {
    let labels = if qos.is_empty() {
        json!({})
    } else {
        json!({"koordinator.sh/qosClass": qos})
    };
    let v = json!({
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"), "labels": labels},
        "spec": {"containers": [{"name": "c"}]},
        "status": {"phase": phase, "qosClass": kube}
    });
    PodMeta::new(Arc::new(serde_json::from_value(v).unwrap())).unwrap()
}

fn strategy(v: serde_json::Value) -> ResourceQosStrategy {
    serde_json::from_value(v).unwrap()
}

/// cpuQOS enabled for LSR, LS and BE with upstream's defaults.
fn all_enabled() -> ResourceQosStrategy {
    strategy(json!({
        "lsrClass": {"cpuQOS": {"enable": true}},
        "lsClass": {"cpuQOS": {"enable": true}},
        "beClass": {"cpuQOS": {"enable": true}},
    }))
}

fn cgroupfs() -> KubeCgroupPaths {
    KubeCgroupPaths::new(CgroupDriver::Cgroupfs)
}

/// `(cgroup, file, value)` of each write.
fn writes(plan: &CpuQosPlan) -> Vec<(String, &'static str, i64)> {
    plan.writes
        .iter()
        .map(|w| {
            assert_eq!(w.strategy, STRATEGY);
            let CgroupValue::Int(v) = w.value else {
                panic!("integer write expected")
            };
            (w.cgroup.to_string(), w.file(), v)
        })
        .collect()
}

fn node_pods() -> Vec<PodMeta> {
    vec![
        pod("be", "BE", "BestEffort"),
        pod("ls", "LS", "Burstable"),
        pod("lsr", "LSR", "Guaranteed"),
        pod("be-burstable", "BE", "Burstable"),
        pod("done", "BE", "BestEffort"),
        pod_in_phase("finished", "BE", "BestEffort", "Succeeded"),
    ]
}

#[test]
fn class_values_follow_upstream_defaults_and_reset_disabled_classes() {
    let s = strategy(json!({
        "lsrClass": {"cpuQOS": {"enable": true}},
        "lsClass": {"cpuQOS": {"enable": false, "groupIdentity": 2}},
        "beClass": {"cpuQOS": {"enable": true, "groupIdentity": 7, "schedIdle": -3}},
    }));
    let c = |q| class_cpu_qos(&s, q);
    // (class, enable, groupIdentity, schedIdle, cpu.idle value, bvt value)
    let table = [
        (QoSClass::Lsr, true, 2, 0, 0, 2),
        (QoSClass::Lse, true, 2, 0, 0, 2),
        (QoSClass::Ls, false, 0, 0, 0, 0),
        (QoSClass::None, false, 0, 0, 0, 0),
        (QoSClass::Be, true, 2, 0, 0, 2), // 7 clamped to 2: an explicit non-negative identity
        (QoSClass::System, false, 0, 0, 0, 0),
    ];
    for (q, enable, gi, idle, idle_value, bvt_value) in table {
        let got = c(q);
        assert_eq!(
            (got.enable, got.group_identity, got.sched_idle),
            (enable, gi, idle),
            "{q:?}"
        );
        assert_eq!(got.value(Mechanism::SchedIdle), idle_value, "{q:?}");
        assert_eq!(got.value(Mechanism::GroupIdentity), bvt_value, "{q:?}");
    }
    let be = class_cpu_qos(&all_enabled(), QoSClass::Be);
    assert_eq!((be.group_identity, be.value(Mechanism::SchedIdle)), (-1, 1));
    let ls_idle = class_cpu_qos(
        &strategy(json!({"lsClass": {"cpuQOS": {"enable": true, "schedIdle": 1}}})),
        QoSClass::Ls,
    );
    assert_eq!(
        ls_idle.value(Mechanism::SchedIdle),
        1,
        "schedIdle: 1 asks for cpu.idle"
    );
}

#[test]
fn mechanism_prefers_group_identity_where_the_kernel_has_it() {
    let k = |idle, bvt| CpuQosKernel { idle, bvt };
    let gi = Some(CpuQosPolicy::GroupIdentity);
    let cs = Some(CpuQosPolicy::CoreSched);
    let table = [
        (k(true, false), None, Some(Mechanism::SchedIdle)),
        (k(true, false), gi, Some(Mechanism::SchedIdle)),
        (k(true, false), cs, Some(Mechanism::SchedIdle)),
        (k(true, true), None, Some(Mechanism::GroupIdentity)),
        (k(false, true), gi, Some(Mechanism::GroupIdentity)),
        (k(true, true), cs, Some(Mechanism::SchedIdle)),
        (k(false, true), cs, None),
        (k(false, false), None, None),
    ];
    for (kernel, policy, want) in table {
        assert_eq!(mechanism(kernel, policy), want, "{kernel:?} {policy:?}");
    }
}

#[test]
fn cpu_idle_marks_be_pods_and_the_besteffort_dir_idle() {
    let pods = node_pods();
    let plan = decide(&CpuQosInput {
        strategy: &all_enabled(),
        pods: &pods,
        paths: &cgroupfs(),
        mechanism: Mechanism::SchedIdle,
    });
    assert_eq!(
        writes(&plan),
        vec![
            ("kubepods/burstable".into(), "cpu.idle", 0),
            ("kubepods/besteffort".into(), "cpu.idle", 1),
            ("kubepods/besteffort/poduid-be".into(), "cpu.idle", 1),
            ("kubepods/burstable/poduid-ls".into(), "cpu.idle", 0),
            ("kubepods/poduid-lsr".into(), "cpu.idle", 0),
            ("kubepods/burstable/poduid-be-burstable".into(), "cpu.idle", 1),
            ("kubepods/besteffort/poduid-done".into(), "cpu.idle", 1),
        ]
    );
    assert_eq!(plan.besteffort_kept, None);
    assert_eq!(plan.classes["BE"].value, 1);
    assert_eq!(plan.classes["LSR"].value, 0);
}

#[test]
fn cpu_idle_keeps_the_besteffort_dir_when_another_class_lives_in_it() {
    let mut pods = node_pods();
    pods.push(pod("ls-no-requests", "LS", "BestEffort"));
    let plan = decide(&CpuQosInput {
        strategy: &all_enabled(),
        pods: &pods,
        paths: &cgroupfs(),
        mechanism: Mechanism::SchedIdle,
    });
    let w = writes(&plan);
    assert!(w.contains(&("kubepods/besteffort".into(), "cpu.idle", 0)));
    assert!(w.contains(&("kubepods/besteffort/poduid-be".into(), "cpu.idle", 1)));
    assert!(w.contains(&("kubepods/besteffort/poduid-ls-no-requests".into(), "cpu.idle", 0)));
    assert!(plan.besteffort_kept.unwrap().contains("ns/ls-no-requests (LS)"));
}

#[test]
fn cpu_idle_resets_everything_when_no_class_is_enabled() {
    let pods = node_pods();
    let plan = decide(&CpuQosInput {
        strategy: &ResourceQosStrategy::default(),
        pods: &pods,
        paths: &KubeCgroupPaths::new(CgroupDriver::Systemd),
        mechanism: Mechanism::SchedIdle,
    });
    let w = writes(&plan);
    assert_eq!(w.len(), 7);
    assert!(w.iter().all(|(_, file, v)| *file == "cpu.idle" && *v == 0));
    assert_eq!(w[1].0, "kubepods.slice/kubepods-besteffort.slice");
    assert_eq!(
        w[2].0,
        "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-poduid_be.slice"
    );
}

#[test]
fn group_identity_writes_upstream_values() {
    let pods = node_pods();
    let s = strategy(json!({
        "lsrClass": {"cpuQOS": {"enable": true}},
        "lsClass": {"cpuQOS": {"enable": true, "groupIdentity": 1}},
        "beClass": {"cpuQOS": {"enable": true}},
    }));
    let plan = decide(&CpuQosInput {
        strategy: &s,
        pods: &pods,
        paths: &cgroupfs(),
        mechanism: Mechanism::GroupIdentity,
    });
    assert_eq!(
        writes(&plan)[..5],
        [
            ("kubepods/burstable".into(), "cpu.bvt_warp_ns", 1),
            ("kubepods/besteffort".into(), "cpu.bvt_warp_ns", -1),
            ("kubepods/besteffort/poduid-be".into(), "cpu.bvt_warp_ns", -1),
            ("kubepods/burstable/poduid-ls".into(), "cpu.bvt_warp_ns", 1),
            ("kubepods/poduid-lsr".into(), "cpu.bvt_warp_ns", 2),
        ]
    );
}

fn run_engine(
    pods: &[PodMeta],
    slo: Option<serde_json::Value>,
    gates: &str,
    kernel: CpuQosKernel,
) -> engine::EnginePlan {
    let slo: Option<NodeSLOSpec> = slo.map(|v| serde_json::from_value(v).unwrap());
    let cgroups = CgroupFacts {
        cpu_qos_kernel: kernel,
        ..CgroupFacts::default()
    };
    engine::run(&EngineInput {
        node: &NodeFacts::default(),
        pods,
        paths: &cgroupfs(),
        node_slo: slo.as_ref(),
        gates: &FeatureGates::parse(gates).unwrap(),
        usage: &UsageFacts::default(),
        cgroups: &cgroups,
        topology: &[],
        in_flight: &BTreeSet::new(),
        state: &EngineState::default(),
        now_seconds: 0.0,
        options: EngineOptions::default(),
    })
}

fn skip_reason<T>(r: &Report<T>) -> Option<&str> {
    match r {
        Report::Skipped { skipped } => Some(skipped),
        Report::Ran(_) => None,
    }
}

#[test]
fn cpu_idle_engine_step_skips_with_a_reason() {
    let pods = node_pods();
    let idle = CpuQosKernel {
        idle: true,
        bvt: false,
    };
    let slo = || Some(json!({"resourceQOSStrategy": {"beClass": {"cpuQOS": {"enable": true}}}}));
    let cases = [
        (
            slo(),
            "GroupIdentity=false",
            idle,
            Some("feature gate GroupIdentity is off"),
        ),
        (None, "", idle, Some("no resourceQOSStrategy in the NodeSLO")),
        (
            slo(),
            "",
            CpuQosKernel::default(),
            Some("this kernel has neither cpu.idle (Linux 5.15+) nor cpu.bvt_warp_ns"),
        ),
        (slo(), "", idle, None),
    ];
    for (slo, gates, kernel, want) in cases {
        let plan = run_engine(&pods, slo, gates, kernel);
        assert_eq!(skip_reason(&plan.strategies.cpu_qos), want, "{gates} {kernel:?}");
        let qos_writes = plan.writes.iter().filter(|w| w.strategy == STRATEGY).count();
        assert_eq!(qos_writes, if want.is_none() { 7 } else { 0 });
    }
    // The plan shows the mechanism and the class values.
    let plan = run_engine(&pods, slo(), "", idle);
    let v = serde_json::to_value(&plan.strategies.cpu_qos).unwrap();
    assert_eq!(v["mechanism"], "cpu.idle");
    assert_eq!(v["classes"]["BE"]["value"], 1);
    assert_eq!(v["classes"]["BE"]["groupIdentity"], -1);
}

#[test]
fn core_sched_gives_each_lsr_and_lse_pod_a_cookie() {
    let mut pods = node_pods();
    pods.push(pod("lse", "LSE", "Guaranteed"));
    pods.push(pod_in_phase("lsr-done", "LSR", "Guaranteed", "Failed"));
    let idle = CpuQosKernel {
        idle: true,
        bvt: false,
    };
    let core_sched = json!({"resourceQOSStrategy": {"policies": {"cpuPolicy": "coreSched"}}});
    let plan = run_engine(&pods, Some(core_sched.clone()), "", idle);
    assert_eq!(
        skip_reason(&plan.strategies.core_sched),
        Some("feature gate CoreSched is off")
    );
    let plan = run_engine(&pods, Some(json!({})), "CoreSched=true", idle);
    assert_eq!(
        skip_reason(&plan.strategies.core_sched),
        Some("resourceQOSStrategy.policies.cpuPolicy is not coreSched")
    );
    let plan = run_engine(&pods, Some(core_sched), "CoreSched=true", idle);
    let Report::Ran(cs) = &plan.strategies.core_sched else {
        panic!("core_sched skipped")
    };
    let names: Vec<(&str, &str)> = cs
        .pods
        .iter()
        .map(|p| (p.name.as_str(), p.cgroup.as_str()))
        .collect();
    assert_eq!(
        names,
        vec![("lsr", "kubepods/poduid-lsr"), ("lse", "kubepods/poduid-lse")]
    );
    assert_eq!(cs.pods[0].uid, "uid-lsr");
}
