//! Tier 2: memory QoS decided by the engine and applied by the executor on a fake cgroup v2
//! tree: the kernel files hold upstream's values at QoS, pod and container level.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use koordlet::executor::{Executor, ExecutorConfig};
use koordlet::plan::parse_input;
use koordlet::states::PodMeta;
use koordlet::system::Cgroups;
use koordlet::system::layout::CgroupLayout;
use koordlet_core::strategies::engine::{
    self, CgroupFacts, EngineInput, EngineOptions, EngineState, NodeFacts, UsageFacts,
};
use koordlet_core::strategies::memory_qos::MemoryQosKernel;
use koordlet_core::{CgroupDriver, FeatureGates, KubeCgroupPaths};

const GI: i64 = 1 << 30;

fn fake_v2(root: &Path, dirs: &[String]) {
    std::fs::write(root.join("cgroup.controllers"), "cpuset cpu io memory pids\n").unwrap();
    for d in dirs {
        let dir = root.join(d);
        std::fs::create_dir_all(&dir).unwrap();
        for (f, v) in [
            ("memory.min", "0\n"),
            ("memory.low", "0\n"),
            ("memory.high", "max\n"),
        ] {
            std::fs::write(dir.join(f), v).unwrap();
        }
    }
}

fn read(root: &Path, dir: &str, file: &str) -> String {
    std::fs::read_to_string(root.join(dir).join(file))
        .unwrap()
        .trim()
        .to_owned()
}

#[test]
fn memory_qos_values_land_in_the_v2_files() {
    let text = std::fs::read_to_string(format!(
        "{}/tests/fixtures/plan_memory_qos_sysctl.yaml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let input = parse_input(&text).unwrap();
    let pods: Vec<PodMeta> = input
        .pods
        .iter()
        .map(|p| PodMeta::new(Arc::new(p.clone())).unwrap())
        .collect();
    let paths = KubeCgroupPaths::new(CgroupDriver::Cgroupfs);
    let mut dirs = vec![
        "kubepods".to_owned(),
        "kubepods/burstable".to_owned(),
        "kubepods/besteffort".to_owned(),
    ];
    for p in &pods {
        dirs.push(p.cgroup_dir(&paths).to_string());
        for c in &p.containers {
            dirs.push(p.container_dir(&paths, c).unwrap().to_string());
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    fake_v2(tmp.path(), &dirs);

    let mut node = NodeFacts::from_node(input.node.as_ref().unwrap());
    node.memory_qos_kernel = MemoryQosKernel::CgroupV2;
    let gates =
        FeatureGates::parse("CgroupReconcile=true,BatchResource=false,BECPUSuppress=false,CPUBurst=false")
            .unwrap();
    let plan = engine::run(&EngineInput {
        node: &node,
        pods: &pods,
        paths: &paths,
        node_slo: input.node_slo.as_ref().map(|s| &s.spec),
        gates: &gates,
        usage: &UsageFacts::default(),
        cgroups: &CgroupFacts::default(),
        topology: &[],
        in_flight: &BTreeSet::new(),
        state: &EngineState::default(),
        now_seconds: 0.0,
        options: EngineOptions::default(),
    });
    assert!(plan.writes.iter().all(|w| w.strategy == "memory_qos"));
    let cgroups = Arc::new(Cgroups::new(tmp.path(), CgroupLayout::v2()));
    let mut executor = Executor::new(cgroups, ExecutorConfig::default());
    koordlet::act::apply_in_plan_order(&mut executor, None, &plan.writes, Instant::now());

    let dir_of = |name: &str| {
        let p = pods.iter().find(|p| p.name == name).unwrap();
        (
            p.cgroup_dir(&paths).to_string(),
            p.container_dir(&paths, &p.containers[0]).unwrap().to_string(),
        )
    };
    let root = tmp.path();
    // web (LS, 2Gi request, 4Gi limit, min=low=100 %, throttling 80 %).
    let (pod, container) = dir_of("web");
    assert_eq!(read(root, &pod, "memory.min"), (2 * GI).to_string());
    assert_eq!(read(root, &pod, "memory.low"), (2 * GI).to_string());
    assert_eq!(read(root, &pod, "memory.high"), "max", "no pod-level memory.high");
    assert_eq!(read(root, &container, "memory.min"), (2 * GI).to_string());
    let high = (2 * GI + 2 * GI * 80 / 100) / 4096 * 4096;
    assert_eq!(read(root, &container, "memory.high"), high.to_string());
    // cache-opted-out: annotation none.
    let (pod, container) = dir_of("cache-opted-out");
    assert_eq!(read(root, &pod, "memory.min"), "0");
    assert_eq!(read(root, &container, "memory.high"), "max");
    // be-batch: batch-memory 1Gi request, 3Gi limit, throttling 60 %.
    let (_, container) = dir_of("be-batch");
    let high = (GI + 2 * GI * 60 / 100) / 4096 * 4096;
    assert_eq!(read(root, &container, "memory.high"), high.to_string());
    // The QoS levels carry their pods' protection so the kernel grants it.
    assert_eq!(
        read(root, "kubepods/burstable", "memory.min"),
        (2 * GI).to_string()
    );
    assert_eq!(read(root, "kubepods", "memory.low"), (2 * GI).to_string());
    assert_eq!(read(root, "kubepods/besteffort", "memory.min"), "0");
}
