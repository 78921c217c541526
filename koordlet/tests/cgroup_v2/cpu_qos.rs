//! cpu_qos on the unified hierarchy: the kubepods probe finds `cpu.idle`, the engine's writes
//! go through the executor, and an idle BE pod yields the CPU to an LS pod.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::thread::sleep;
use std::time::{Duration, Instant};

use koord_api::NodeSLOSpec;
use koordlet::executor::{Executor, ExecutorConfig};
use koordlet::system::cpu_qos::probe_cpu_qos;
use koordlet::system::{CgroupDriver, Cgroups, KubeCgroupPaths, SystemRoots};
use koordlet_core::features::FeatureGates;
use koordlet_core::pod::PodMeta;
use koordlet_core::strategies::engine::{
    self, CgroupFacts, EngineInput, EngineOptions, EngineState, NodeFacts, UsageFacts,
};
use serde_json::json;

use super::in_vm_only;
use super::tree::V2Tree;

fn pod(name: &str, qos: &str, kube: &str) -> PodMeta {
    let v = json!({
        "metadata": {"name": name, "namespace": "ns", "uid": format!("{name}-cpu-idle"),
                     "labels": {"koordinator.sh/qosClass": qos}},
        "spec": {"containers": [{"name": "c"}]},
        "status": {"phase": "Running", "qosClass": kube}
    });
    PodMeta::new(Arc::new(serde_json::from_value(v).unwrap())).unwrap()
}

#[test]
#[ignore = "runs inside the cgroup v2 VM"]
fn cgroup_v2_vm_cpu_idle_strategy_through_the_executor() {
    in_vm_only!();
    let mut tree = V2Tree::new("cpuidle");
    let cgroups = Arc::new(Cgroups::detect(&SystemRoots::default()).unwrap());
    let paths = KubeCgroupPaths::with_parent(CgroupDriver::Systemd, Path::new(&tree.name)).unwrap();
    let pods = vec![pod("ls", "LS", "Burstable"), pod("be", "BE", "BestEffort")];
    let local = |p: &PodMeta| {
        let dir = p.cgroup_dir(&paths).to_string();
        dir.strip_prefix(&format!("{}/", tree.name)).unwrap().to_owned()
    };
    let (ls, be) = (local(&pods[0]), local(&pods[1]));
    tree.mkdir(&ls);
    tree.mkdir(&be);
    // Every task of the test on one CPU.
    tree.write("", "cpuset.cpus", "1").expect("pin to CPU 1");
    let kernel = probe_cpu_qos(&cgroups, &paths).unwrap();
    assert!(kernel.idle && !kernel.bvt, "{kernel:?}");
    let mut exec = Executor::new(cgroups.clone(), ExecutorConfig::default());
    let mut apply = |qos: serde_json::Value| {
        let slo: NodeSLOSpec = serde_json::from_value(json!({"resourceQOSStrategy": qos})).unwrap();
        let facts = CgroupFacts {
            cpu_qos_kernel: kernel,
            ..CgroupFacts::default()
        };
        let plan = engine::run(&EngineInput {
            node: &NodeFacts::default(),
            pods: &pods,
            paths: &paths,
            node_slo: Some(&slo),
            gates: &FeatureGates::default(),
            usage: &UsageFacts::default(),
            cgroups: &facts,
            topology: &[],
            in_flight: &BTreeSet::new(),
            state: &EngineState::default(),
            now_seconds: 0.0,
            options: EngineOptions::default(),
        });
        let writes: Vec<_> = plan
            .writes
            .into_iter()
            .filter(|w| w.strategy == "cpu_qos")
            .collect();
        assert_eq!(writes.len(), 4, "{writes:?}");
        let report = exec.apply_refs(&writes, Instant::now());
        assert!(report.errors.is_empty(), "{:?}", report.errors);
    };
    tree.spawn_burner(&ls);
    tree.spawn_burner(&be);
    tree.spawn_burner(&be);
    let measure = |tree: &V2Tree| {
        let (l0, b0) = (tree.usage_usec(&ls), tree.usage_usec(&be));
        sleep(Duration::from_millis(2000));
        let (l, b) = (tree.usage_usec(&ls) - l0, tree.usage_usec(&be) - b0);
        l as f64 / (l + b).max(1) as f64
    };
    let without = measure(&tree);
    apply(json!({"beClass": {"cpuQOS": {"enable": true}}}));
    assert_eq!(tree.read(&be, "cpu.idle"), "1");
    assert_eq!(
        tree.read("kubepods.slice/kubepods-besteffort.slice", "cpu.idle"),
        "1"
    );
    assert_eq!(tree.read(&ls, "cpu.idle"), "0");
    sleep(Duration::from_millis(200));
    let with = measure(&tree);
    apply(json!({}));
    assert_eq!(tree.read(&be, "cpu.idle"), "0");
    assert_eq!(
        tree.read("kubepods.slice/kubepods-besteffort.slice", "cpu.idle"),
        "0"
    );
    println!("cpu.idle on v2: LS share of one CPU {without:.2} without, {with:.2} with BE idle");
    assert!(
        with >= 0.9 && with > without + 0.2,
        "LS share {without:.2} -> {with:.2}"
    );
}
