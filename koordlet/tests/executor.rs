//! Tier 2: the executor against fake cgroup trees: skip-if-equal, cache and forced refresh,
//! ordering, dry-run, audit lines, per-write errors.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

mod common;

use koord_api::KubeQoSClass;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{FakeHost, LogCapture, uid};
use koordlet::executor::{CgroupWrite, Executor, ExecutorConfig};
use koordlet::system::{
    CgroupDir, CgroupDriver, CgroupResource as R, CgroupValue, CgroupVersion, Cgroups, CpuSet,
};

fn setup(version: CgroupVersion, dry_run: bool) -> (FakeHost, Executor) {
    let host = FakeHost::new(version, CgroupDriver::Cgroupfs);
    let cgroups = Arc::new(Cgroups::detect(&host.roots).unwrap());
    let exec = Executor::new(
        cgroups,
        ExecutorConfig {
            force_refresh: Duration::from_secs(60),
            dry_run,
        },
    );
    (host, exec)
}

fn write(dir: &CgroupDir, resource: R, value: i64) -> CgroupWrite {
    CgroupWrite {
        cgroup: dir.clone(),
        resource,
        value: CgroupValue::Int(value),
        strategy: "be_limits".into(),
    }
}

fn be_pod(host: &FakeHost) -> CgroupDir {
    host.paths.pod_dir(KubeQoSClass::BestEffort, &uid())
}

#[test]
fn skips_equal_values_trusts_the_cache_then_refreshes() {
    let (host, mut exec) = setup(CgroupVersion::V1, false);
    let dir = be_pod(&host);
    let t0 = Instant::now();
    let r = exec.apply(vec![write(&dir, R::CpuCfsQuota, 50_000)], t0);
    assert_eq!(r.changes.len(), 1);
    assert_eq!(host.read("cpu", dir.as_path(), "cpu.cfs_quota_us"), "50000");
    // The write reached the kernel: it is timed.
    assert_eq!(r.timings.len(), 1);
    assert!(r.timings[0].ok && r.timings[0].resource == R::CpuCfsQuota);

    let r = exec.apply(
        vec![write(&dir, R::CpuCfsQuota, 50_000)],
        t0 + Duration::from_secs(1),
    );
    assert_eq!((r.changes.len(), r.skipped_cached), (0, 1));
    assert!(r.timings.is_empty());

    // Someone else changes the file: within the refresh period the cache is trusted ...
    std::fs::write(host.file("cpu", dir.as_path(), "cpu.cfs_quota_us"), "-1").unwrap();
    let r = exec.apply(
        vec![write(&dir, R::CpuCfsQuota, 50_000)],
        t0 + Duration::from_secs(30),
    );
    assert_eq!(r.skipped_cached, 1);
    // ... after it, the value is checked and restored.
    let r = exec.apply(
        vec![write(&dir, R::CpuCfsQuota, 50_000)],
        t0 + Duration::from_secs(61),
    );
    assert_eq!(r.changes.len(), 1);
    assert_eq!(
        (r.changes[0].old.as_str(), r.changes[0].new.as_str()),
        ("-1", "50000")
    );

    // A value already in the file (not from us) is not rewritten.
    let r = exec.apply(
        vec![write(&dir, R::CpuShares, 1024)],
        t0 + Duration::from_secs(62),
    );
    assert_eq!((r.changes.len(), r.skipped_unchanged), (0, 1));
}

#[test]
fn quota_and_burst_go_in_the_order_the_kernel_accepts() {
    for version in [CgroupVersion::V1, CgroupVersion::V2] {
        let (host, mut exec) = setup(version, false);
        let dir = be_pod(&host);
        let t = Instant::now();
        // From "no limit" (-1) any quota tightens, so the burst (loosening) goes first, which
        // the kernel accepts while the quota is unlimited.
        let r = exec.apply(
            vec![
                write(&dir, R::CpuCfsQuota, 100_000),
                write(&dir, R::CpuCfsBurst, 50_000),
            ],
            t,
        );
        let order: Vec<R> = r.changes.iter().map(|c| c.resource).collect();
        assert_eq!(order, [R::CpuCfsBurst, R::CpuCfsQuota], "{version:?}");
        // Raise: quota first.
        let r = exec.apply(
            vec![
                write(&dir, R::CpuCfsBurst, 150_000),
                write(&dir, R::CpuCfsQuota, 200_000),
            ],
            t,
        );
        let order: Vec<R> = r.changes.iter().map(|c| c.resource).collect();
        assert_eq!(order, [R::CpuCfsQuota, R::CpuCfsBurst], "{version:?}");
        // Lower: burst first.
        let r = exec.apply(
            vec![
                write(&dir, R::CpuCfsQuota, 50_000),
                write(&dir, R::CpuCfsBurst, 20_000),
            ],
            t,
        );
        let order: Vec<R> = r.changes.iter().map(|c| c.resource).collect();
        assert_eq!(order, [R::CpuCfsBurst, R::CpuCfsQuota], "{version:?}");
        // Lower the quota alone below the burst the kernel holds: the burst is clamped first.
        exec.apply(
            vec![
                write(&dir, R::CpuCfsQuota, 200_000),
                write(&dir, R::CpuCfsBurst, 150_000),
            ],
            t + Duration::from_secs(120),
        );
        let r = exec.apply(
            vec![write(&dir, R::CpuCfsQuota, 30_000)],
            t + Duration::from_secs(240),
        );
        let steps: Vec<(R, &str)> = r.changes.iter().map(|c| (c.resource, c.new.as_str())).collect();
        let quota_text = if version == CgroupVersion::V1 {
            "30000"
        } else {
            "30000 100000"
        };
        assert_eq!(
            steps,
            [(R::CpuCfsBurst, "30000"), (R::CpuCfsQuota, quota_text)],
            "{version:?}"
        );
        assert!(r.changes[0].strategy.contains("burst clamp"));
    }
}

#[test]
fn cpusets_widen_parents_top_down_then_narrow_children_bottom_up() {
    let (host, mut exec) = setup(CgroupVersion::V1, false);
    let qos = host.paths.qos_dir(KubeQoSClass::BestEffort);
    let pod = be_pod(&host);
    std::fs::write(host.file("cpuset", qos.as_path(), "cpuset.cpus"), "0-1").unwrap();
    std::fs::write(host.file("cpuset", pod.as_path(), "cpuset.cpus"), "0-1").unwrap();
    let cpus = |s: &str| CgroupValue::Cpus(CpuSet::parse(s).unwrap());
    let plan = vec![
        CgroupWrite {
            cgroup: pod.clone(),
            resource: R::CpusetCpus,
            value: cpus("2-3"),
            strategy: "cpu_suppress".into(),
        },
        CgroupWrite {
            cgroup: qos.clone(),
            resource: R::CpusetCpus,
            value: cpus("2-3"),
            strategy: "cpu_suppress".into(),
        },
    ];
    let r = exec.apply(plan, Instant::now());
    let steps: Vec<(String, &str)> = r
        .changes
        .iter()
        .map(|c| (c.cgroup.to_string(), c.new.as_str()))
        .collect();
    assert_eq!(
        steps,
        [
            (qos.to_string(), "0-3"),
            (pod.to_string(), "0-3"),
            (pod.to_string(), "2-3"),
            (qos.to_string(), "2-3"),
        ]
    );
    assert_eq!(host.read("cpuset", qos.as_path(), "cpuset.cpus"), "2-3");
}

#[test]
fn dry_run_logs_and_writes_nothing() {
    let (host, mut exec) = setup(CgroupVersion::V2, true);
    let dir = be_pod(&host);
    let logs = LogCapture::default();
    let r = logs.run(|| exec.apply(vec![write(&dir, R::CpuCfsQuota, 50_000)], Instant::now()));
    assert_eq!(r.changes.len(), 1);
    assert!(r.timings.is_empty(), "nothing written, nothing timed");
    assert_eq!(host.read("", dir.as_path(), "cpu.max"), "max 100000");
    let text = logs.text();
    assert!(text.contains("dry_run=true"), "{text}");
    // Nothing cached: the next round reports it again.
    assert_eq!(
        exec.apply(vec![write(&dir, R::CpuCfsQuota, 50_000)], Instant::now())
            .changes
            .len(),
        1
    );
}

#[test]
fn one_audit_line_per_real_change() {
    let (host, mut exec) = setup(CgroupVersion::V2, false);
    let dir = be_pod(&host);
    let logs = LogCapture::default();
    let t = Instant::now();
    logs.run(|| {
        exec.apply(
            vec![write(&dir, R::CpuCfsQuota, 50_000), write(&dir, R::CpuShares, 2)],
            t,
        );
        exec.apply(
            vec![write(&dir, R::CpuCfsQuota, 50_000), write(&dir, R::CpuShares, 2)],
            t + Duration::from_secs(1),
        );
    });
    let text = logs.text();
    let lines: Vec<&str> = text.lines().filter(|l| l.contains("cgroup write")).collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines.iter().any(|l| l.contains("file=\"cpu.max\"")
            && l.contains("max 100000 -> 50000 100000")
            && l.contains("strategy=be_limits")),
        "{text}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("file=\"cpu.weight\"") && l.contains("100 -> 1")),
        "{text}"
    );
    assert!(
        lines.iter().all(|l| l.contains(&format!("cgroup={dir}"))),
        "{text}"
    );
}

#[test]
fn failures_are_reported_per_write_and_do_not_stop_the_round() {
    let (host, mut exec) = setup(CgroupVersion::V1, false);
    let dir = be_pod(&host);
    let gone = CgroupDir::new("kubepods/besteffort/podgone").unwrap();
    let plan = vec![
        write(&dir, R::CpuShares, 1),   // outside the domain
        write(&gone, R::CpuShares, 2),  // vanished pod
        write(&dir, R::CpuIdle, 1),     // unsupported on this kernel
        write(&dir, R::CpuShares, 512), // fine
    ];
    let r = exec.apply(plan, Instant::now());
    assert_eq!(r.errors.len(), 1);
    assert_eq!(r.errors[0].write.resource, R::CpuShares);
    assert_eq!((r.skipped_missing, r.skipped_unsupported), (1, 1));
    assert_eq!(r.changes.len(), 1);
    assert_eq!(host.read("cpu", dir.as_path(), "cpu.shares"), "512");
    // Only the write that reached the kernel is timed (the others stopped before).
    assert_eq!(r.timings.len(), 1);
}

#[test]
fn cache_forgets_vanished_pods() {
    let (host, mut exec) = setup(CgroupVersion::V1, false);
    let dir = be_pod(&host);
    let t = Instant::now();
    exec.apply(
        vec![
            write(&dir, R::CpuShares, 512),
            write(&dir, R::CpuCfsQuota, 20_000),
        ],
        t,
    );
    assert_eq!(exec.cached_entries(), 2);
    exec.forget(&host.paths.qos_dir(KubeQoSClass::BestEffort));
    assert_eq!(exec.cached_entries(), 0);
    exec.apply(vec![write(&dir, R::CpuShares, 512)], t);
    // Entries older than twice the refresh period are dropped on the next apply.
    exec.apply(vec![], t + Duration::from_secs(121));
    assert_eq!(exec.cached_entries(), 0);
}

#[test]
fn kernels_without_burst_get_no_clamp_and_no_log_line() {
    let (host, mut exec) = setup(CgroupVersion::V1, false);
    let dir = be_pod(&host);
    std::fs::remove_file(host.file("cpu", dir.as_path(), "cpu.cfs_burst_us")).unwrap();
    let logs = LogCapture::default();
    let r = logs.run(|| exec.apply(vec![write(&dir, R::CpuCfsQuota, 30_000)], Instant::now()));
    assert_eq!(r.changes.len(), 1);
    assert!(r.errors.is_empty());
    assert!(!logs.text().contains("unsupported"), "{}", logs.text());
}

/// A pod directory replaced by a symlink to somewhere outside the cgroup root (a compromised
/// or misconfigured host): the executor refuses the write with a clear error and the file
/// outside keeps its content.
#[test]
fn writes_never_follow_a_symlink_out_of_the_cgroup_root() {
    let (host, mut exec) = setup(CgroupVersion::V1, false);
    let dir = be_pod(&host);
    let pod_path = host.roots.cgroup.join("cpu").join(dir.as_path());
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("cpu.cfs_quota_us");
    std::fs::write(&victim, "-1\n").unwrap();
    std::fs::remove_dir_all(&pod_path).unwrap();
    std::os::unix::fs::symlink(outside.path(), &pod_path).unwrap();

    let r = exec.apply(vec![write(&dir, R::CpuCfsQuota, 50_000)], Instant::now());
    assert!(r.changes.is_empty(), "{:?}", r.changes);
    assert_eq!(r.errors.len(), 1, "{:?}", r.errors);
    let error = r.errors[0].error.to_string();
    assert!(error.contains("outside the configured root"), "{error}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "-1\n");
}
