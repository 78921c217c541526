//! Footprint benchmark: koordlet's collection round (collectors + BE limits decision + executor)
//! over 50/110/250/500 pods × 3 containers on a generated fake cgroupfs (v1, cgroupfs driver),
//! at a 1 s interval over 10 simulated minutes (injected clock, run as fast as possible), with
//! 5 % of the pods replaced every simulated minute (churn). Prints RSS and CPU time per round.
//! The BE limits go through the live loop's path: per-pod decisions kept in a
//! `BeLimitsCache`, writes applied borrowed with the executor's cache and its forced refresh
//! (every 60 simulated seconds).
//!
//! `cargo bench -p koordlet --bench footprint [sizes...] [--uncached]` (prints a table; no timed
//! assertions). `--uncached` measures the path before the per-pod cache for comparison:
//! `be_limits::decide` every round, each write converted and applied owned.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)] // bench code

use koord_api::KubeQoSClass;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use koordlet::executor::{Executor, ExecutorConfig};
use koordlet::metrics::MetricTime;
use koordlet::metrics::collector::{Collector, Stores};
use koordlet::states::{PodMeta, Snapshot};
use koordlet::system::{CgroupDriver, Cgroups, ContainerId, KubeCgroupPaths, PodUid, SystemRoots};
use koordlet_core::strategies::be_limits::{self, BeLimitsCache, BeLimitsSettings};

const ROUNDS: i64 = 600;
const CONTROLLERS: [&str; 4] = ["cpu", "cpuacct", "cpuset", "memory"];

/// The thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`: exact, unlike `/proc/thread-self/schedstat`,
/// which moves in scheduler ticks on some kernels).
fn thread_cpu_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(t.tv_nsec).unwrap_or(0)
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn write_cgroup(roots: &SystemRoots, rel: &Path, usage_ns: u64) {
    for (sub, files) in [
        ("cpu", vec![("cpu.shares", "2".to_string()), ("cpu.cfs_quota_us", "-1".into()), ("cpu.cfs_period_us", "100000".into())]),
        ("cpuacct", vec![("cpuacct.usage", usage_ns.to_string())]),
        ("cpuset", vec![("cpuset.cpus", "0-7".into())]),
        (
            "memory",
            vec![
                ("memory.limit_in_bytes", "9223372036854771712".into()),
                ("memory.usage_in_bytes", "104857600".into()),
                ("memory.stat", "total_inactive_anon 1000\ntotal_active_anon 50000000\ntotal_inactive_file 20000000\ntotal_active_file 30000000\ntotal_unevictable 0\n".into()),
            ],
        ),
    ] {
        let dir = roots.cgroup.join(sub).join(rel);
        std::fs::create_dir_all(&dir).unwrap();
        for (f, v) in files {
            std::fs::write(dir.join(f), v).unwrap();
        }
    }
}

fn make_pod(i: usize, generation: usize) -> Pod {
    let uid = format!("{generation:08x}-0000-0000-0000-{i:012x}");
    let be = i.is_multiple_of(2);
    let containers: Vec<_> = (0..3)
        .map(|c| {
            if be {
                serde_json::json!({"name": format!("c{c}"), "resources": {
                    "requests": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "256Mi"},
                    "limits": {"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "512Mi"}}})
            } else {
                serde_json::json!({"name": format!("c{c}")})
            }
        })
        .collect();
    let statuses: Vec<_> = (0..3)
        .map(|c| serde_json::json!({"name": format!("c{c}"), "containerID": format!("containerd://{i:08x}{generation:04x}{c:04x}"),
            "image": "", "imageID": "", "ready": true, "restartCount": 0}))
        .collect();
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("pod-{i}-{generation}"), "namespace": "bench", "uid": uid,
                     "labels": {"koordinator.sh/qosClass": if be { "BE" } else { "LS" }}},
        "spec": {"containers": containers},
        "status": {"qosClass": "BestEffort", "phase": "Running", "containerStatuses": statuses}
    }))
    .unwrap()
}

fn create_pod_tree(roots: &SystemRoots, paths: &KubeCgroupPaths, pod: &PodMeta, usage: u64) {
    write_cgroup(
        roots,
        paths.pod_dir(KubeQoSClass::BestEffort, &pod.uid).as_path(),
        usage,
    );
    for c in &pod.containers {
        let id: &ContainerId = c.id.as_ref().unwrap();
        write_cgroup(
            roots,
            paths
                .container_dir(KubeQoSClass::BestEffort, &pod.uid, id)
                .as_path(),
            usage,
        );
    }
}

fn run(pods_n: usize, uncached: bool) {
    let dir = tempfile::tempdir().unwrap();
    let roots = SystemRoots::under(dir.path());
    std::fs::create_dir_all(roots.proc.join("self")).unwrap();
    let cg = roots.cgroup.display().to_string();
    let mut mountinfo = String::new();
    for (i, c) in CONTROLLERS.iter().enumerate() {
        std::fs::create_dir_all(roots.cgroup.join(c)).unwrap();
        mountinfo.push_str(&format!(
            "{} 31 0:{} / {cg}/{c} rw - cgroup cgroup rw,{c}\n",
            32 + i,
            29 + i
        ));
    }
    std::fs::write(roots.proc.join("self/mountinfo"), mountinfo).unwrap();
    std::fs::write(
        roots.proc.join("meminfo"),
        "MemTotal: 32000000 kB\nMemFree: 8000000 kB\nMemAvailable: 16000000 kB\n",
    )
    .unwrap();
    let paths = KubeCgroupPaths::new(CgroupDriver::Cgroupfs);
    let _ = PodUid::new("x");
    let cgroups = Arc::new(Cgroups::detect(&roots).unwrap());
    let mut generations = vec![0usize; pods_n];
    let build = |generations: &[usize]| -> Vec<PodMeta> {
        generations
            .iter()
            .enumerate()
            .map(|(i, g)| PodMeta::new(Arc::new(make_pod(i, *g))).unwrap())
            .collect()
    };
    let mut metas = build(&generations);
    for m in &metas {
        create_pod_tree(&roots, &paths, m, 0);
    }
    let mut snapshot = Snapshot {
        pods: Arc::new(metas.clone()),
        pods_synced: true,
        ..Snapshot::default()
    };
    let mut collector = Collector::new(cgroups.clone(), roots.clone(), paths.clone());
    let mut executor = Executor::new(cgroups, ExecutorConfig::default());
    // As the live loop (`engine::run_cached`): decisions kept per pod, writes applied borrowed.
    let mut cache = BeLimitsCache::new();
    let mut stores = Stores::default();
    let t0 = 1_700_000_000_000i64;
    let start = Instant::now();
    let (mut cpu_collect, mut cpu_limits) = (Vec::new(), Vec::new());
    // be_limits+executor in rounds without pod changes or forced refresh (not the first, not
    // a churn round).
    let mut cpu_limits_steady = Vec::new();
    let mut rss_after_1m = 0;
    let mut rss_max = 0;
    for round in 0..ROUNDS {
        // The "kernel": counters move, outside the measurement.
        let ticks = (round as u64 + 1) * 100;
        std::fs::write(
            roots.proc.join("stat"),
            format!("cpu  {ticks} 0 {ticks} 100000 0 0 0 0 0 0\n"),
        )
        .unwrap();
        if round.rem_euclid(10) == 0 {
            for m in metas.iter().step_by(7) {
                let p = roots
                    .cgroup
                    .join("cpuacct")
                    .join(paths.pod_dir(KubeQoSClass::BestEffort, &m.uid).as_path());
                std::fs::write(p.join("cpuacct.usage"), (round as u64 * 500_000_000).to_string()).unwrap();
            }
        }
        if round > 0 && round.rem_euclid(60) == 0 {
            // Churn: 5 % of the pods replaced by new ones (old cgroups removed).
            for i in (0..pods_n).step_by(20) {
                let _ = std::fs::remove_dir_all(
                    roots
                        .cgroup
                        .join("cpu")
                        .join(metas[i].cgroup_dir(&paths).as_path()),
                );
                generations[i] += 1;
            }
            metas = build(&generations);
            for i in (0..pods_n).step_by(20) {
                create_pod_tree(&roots, &paths, &metas[i], 0);
            }
            snapshot.pods = Arc::new(metas.clone());
        }
        let now = MetricTime(t0 + round * 1000);
        let c0 = thread_cpu_ns();
        collector.collect(&snapshot, now, &mut stores);
        let c1 = thread_cpu_ns();
        // The executor's clock is simulated too, so its forced refresh (every 60 s) happens
        // every 60 rounds, as it would live.
        let at = start + Duration::from_secs(round as u64);
        if uncached {
            // Without the cache: decided from scratch every round, applied owned.
            let plan = be_limits::decide(&snapshot.pods, &paths, BeLimitsSettings::default());
            executor.apply(plan.writes, at);
        } else {
            let decided = cache.decide(&snapshot.pods, &paths, BeLimitsSettings::default());
            executor.apply_refs(decided.writes(), at);
        }
        let c2 = thread_cpu_ns();
        cpu_collect.push(c1 - c0);
        cpu_limits.push(c2 - c1);
        if round > 0 && round.rem_euclid(60) != 0 {
            cpu_limits_steady.push(c2 - c1);
        }
        if round == 60 {
            rss_after_1m = rss_kib();
        }
        rss_max = rss_max.max(rss_kib());
    }
    let rss_end = rss_kib();
    let ms = |v: &[u64]| v.iter().sum::<u64>() as f64 / v.len() as f64 / 1e6;
    let p99 = |v: &mut Vec<u64>| {
        v.sort_unstable();
        v[(v.len() * 99).div_ceil(100) - 1] as f64 / 1e6
    };
    println!(
        "| {pods_n:>4} | {:>6.2} | {:>6.2} | {:>6.2} | {:>6.2} | {:>6.3} | {:>7.1} | {:>7.1} | {:>7.1} | {:>7.1} | {:>5.1} |",
        ms(&cpu_collect),
        p99(&mut cpu_collect.clone()),
        ms(&cpu_limits),
        p99(&mut cpu_limits.clone()),
        ms(&cpu_limits_steady),
        rss_after_1m as f64 / 1024.0,
        rss_end as f64 / 1024.0,
        rss_max as f64 / 1024.0,
        (stores.node.approx_bytes() + stores.pods.approx_bytes()) as f64 / 1024.0 / 1024.0,
        start.elapsed().as_secs_f64(),
    );
}

fn main() {
    println!(
        "10 simulated minutes at 1 s, 3 containers per pod, half BE, 5 %/min churn; CPU = thread CPU time"
    );
    println!(
        "| pods | collect ms/round (avg) | collect p99 | be_limits+executor ms/round (avg) | p99 | same, rounds without churn or refresh (avg) | RSS MiB @1 min | RSS MiB @10 min | RSS MiB max | store MiB | wall s |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let sizes: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let uncached = std::env::args().any(|a| a == "--uncached");
    if uncached {
        println!("(--uncached: BE limits decided from scratch and converted every round)");
    }
    let sizes = if sizes.is_empty() {
        vec![50, 110, 250, 500]
    } else {
        sizes
    };
    for n in sizes {
        run(n, uncached);
    }
}
