//! How long the CPU set policy decision takes on a big node: 96 CPUs (2 sockets × 24 cores × 2
//! threads), 3 containers per pod, one pod in ten `exclusive` (1 CPU per container), one in ten
//! `share`. Ignored by default; run with
//! `cargo test -p koordlet --test cpuset_policy_bench -- --ignored --nocapture`.
//! Prints figures, asserts nothing about time.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::hint::black_box;
use std::time::Instant;

use koord_api::QoSClass;
use koordlet_core::CgroupDir;
use koordlet_core::strategies::cpu_suppress::CgroupState;
use koordlet_core::strategies::cpuset::{CpuInfo, CpuList};
use koordlet_core::strategies::cpuset_policy::{
    CpusetAllocations, CpusetPolicy, CpusetPolicyInput, PolicyContainer, PolicyPod, decide,
};

const ROUNDS: usize = 200;

fn topology() -> Vec<CpuInfo> {
    (0..96)
        .map(|cpu| {
            let phys = cpu % 48;
            CpuInfo {
                cpu,
                core: phys,
                socket: phys / 24,
                node: phys / 24,
            }
        })
        .collect()
}

fn dir(path: String, cpus: &CpuList) -> CgroupState {
    CgroupState {
        dir: CgroupDir::new(&path).unwrap(),
        cfs_quota_us: None,
        cpuset: Some(cpus.clone()),
    }
}

fn pods(n: usize, all: &CpuList) -> Vec<PolicyPod> {
    (0..n)
        .map(|i| {
            let policy = match i % 10 {
                0 => Some(CpusetPolicy::Exclusive),
                5 => Some(CpusetPolicy::Share),
                _ => None,
            };
            PolicyPod {
                uid: format!("uid-{i}"),
                namespace: "default".into(),
                name: format!("pod-{i}"),
                qos: QoSClass::Ls,
                be: false,
                policy: Ok(policy),
                bound: None,
                qos_dir: dir("kubepods/burstable".into(), all),
                pod_dir: dir(format!("kubepods/burstable/pod{i}"), all),
                containers: (0..3)
                    .map(|c| PolicyContainer {
                        name: format!("c{c}"),
                        cpu_limit_milli: Some(1000),
                        dir: Some(dir(format!("kubepods/burstable/pod{i}/c{c}"), all)),
                    })
                    .collect(),
            }
        })
        .collect()
}

fn percentile(mut samples: Vec<f64>, q: f64) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)]
}

#[test]
#[ignore = "benchmark: prints figures"]
fn cpuset_policy_decide_bench() {
    let topology = topology();
    let all = CpuList::from_cpus(0..96);
    let reserved = CpuList::new();
    for n in [50usize, 110, 250] {
        let pods = pods(n, &all);
        let input = |state| CpusetPolicyInput {
            topology: &topology,
            reserved: &reserved,
            pods: &pods,
            state,
            manage_be: true,
        };
        let empty = CpusetAllocations::default();
        let first = decide(&input(&empty));
        assert!(first.problems.is_empty(), "{:?}", first.problems);
        let steady_state = first.next_state.clone();
        let mut fresh = Vec::new();
        let mut steady = Vec::new();
        for _ in 0..ROUNDS {
            let t = Instant::now();
            black_box(decide(&input(&empty)));
            fresh.push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            black_box(decide(&input(&steady_state)));
            steady.push(t.elapsed().as_secs_f64() * 1e3);
        }
        println!(
            "{n:>4} pods, {:>3} pinned containers: first round p50 {:.2} ms p99 {:.2} ms; kept p50 {:.2} ms p99 {:.2} ms",
            first.allocations.len(),
            percentile(fresh.clone(), 0.5),
            percentile(fresh, 0.99),
            percentile(steady.clone(), 0.5),
            percentile(steady, 0.99),
        );
    }
}
