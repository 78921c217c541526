//! Tier 3: the system layer and the executor on this machine's kernel. Creates
//! `/sys/fs/cgroup/<controller>/koord-test-<unique>/kubepods/...`, removes it on drop (also on
//! panic), and prints `skipped: <reason>` and passes where that is not possible.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use koord_api::KubeQoSClass;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use koord_test_support::CgroupV1Tree;
use koordlet::executor::{CgroupWrite, Executor, ExecutorConfig};
use koordlet::system::{
    CgroupDir, CgroupDriver, CgroupResource as R, CgroupValue, CgroupVersion, Cgroups, ContainerId, FdBudget,
    KubeCgroupPaths, PodUid, Subsystem, SystemError, SystemRoots,
};

/// The controllers koordlet's tests here use, in the names of cgroup v1 mount options.
const CONTROLLERS: [&str; 3] = ["cpu", "cpuacct", "memory"];

/// The test's own cgroup subtree (removed on drop, also on panic) and the host as koordlet
/// detects it, or why the test cannot run here.
fn host() -> Result<(CgroupV1Tree, Cgroups), String> {
    let tree = CgroupV1Tree::new(&CONTROLLERS).map_err(|e| e.to_string())?;
    let cgroups = Cgroups::detect(&SystemRoots::default()).map_err(|e| format!("no cgroup layout: {e}"))?;
    if cgroups.version() != CgroupVersion::V1 {
        return Err("this test builds a v1 tree; the host runs cgroup v2".into());
    }
    for sub in [Subsystem::Cpu, Subsystem::CpuAcct, Subsystem::Memory] {
        if cgroups.layout().subsystem_dir(sub).is_none() {
            return Err(format!("{} controller not mounted", sub.name()));
        }
    }
    Ok((tree, cgroups))
}

#[test]
fn detection_paths_and_executor_on_the_real_kernel() {
    let (tree, cgroups) = match host() {
        Ok(host) => host,
        Err(reason) => {
            println!("skipped: {reason}");
            return;
        }
    };
    let parent = PathBuf::from(tree.name());

    let paths = KubeCgroupPaths::with_parent(CgroupDriver::Cgroupfs, &parent).unwrap();
    let uid = PodUid::new("0a1b2c3d-0000-1111-2222-333344445555").unwrap();
    let cid = ContainerId::parse("containerd://feedface0123").unwrap();
    let pod = paths.pod_dir(KubeQoSClass::BestEffort, &uid);
    let container = paths.container_dir(KubeQoSClass::BestEffort, &uid, &cid);
    tree.mkdir(
        &container
            .as_path()
            .strip_prefix(&parent)
            .unwrap()
            .to_string_lossy(),
    )
    .unwrap();

    // Detection on this machine: v1 (hybrid counts as v1) and, below our parent, cgroupfs.
    assert_eq!(cgroups.version(), CgroupVersion::V1);
    assert_eq!(
        koordlet::system::detect_driver(cgroups.root(), cgroups.layout(), &parent),
        Some(CgroupDriver::Cgroupfs)
    );
    assert_eq!(
        cgroups.file_path(R::CpuCfsQuota, &pod).unwrap(),
        Path::new("/sys/fs/cgroup")
            .join(cgroups.layout().subsystem_dir(Subsystem::Cpu).unwrap())
            .join(&parent)
            .join("kubepods/besteffort")
            .join(format!("pod{uid}"))
            .join("cpu.cfs_quota_us")
    );

    let cgroups = Arc::new(cgroups);
    let mut exec = Executor::new(cgroups.clone(), ExecutorConfig::default());
    let w = |dir: &CgroupDir, resource, value| CgroupWrite {
        cgroup: dir.clone(),
        resource,
        value: CgroupValue::Int(value),
        strategy: "real_kernel_test".into(),
    };
    let t0 = Instant::now();

    // Tightening from "no limit": the kernel refuses a child quota above its parent's, so the
    // container must go first; the executor orders it.
    let report = exec.apply(
        vec![
            w(&pod, R::CpuCfsQuota, 50_000),
            w(&pod, R::CpuCfsPeriod, 100_000),
            w(&container, R::CpuCfsQuota, 20_000),
            w(&pod, R::MemoryLimit, 256 << 20),
        ],
        t0,
    );
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(
        cgroups.read(R::CpuCfsQuota, &pod).unwrap(),
        CgroupValue::Int(50_000)
    );
    assert_eq!(
        cgroups.read(R::CpuCfsQuota, &container).unwrap(),
        CgroupValue::Int(20_000)
    );
    assert_eq!(
        cgroups.read(R::CpuCfsPeriod, &pod).unwrap(),
        CgroupValue::Int(100_000)
    );
    assert_eq!(
        cgroups.read(R::MemoryLimit, &pod).unwrap(),
        CgroupValue::Int(256 << 20)
    );
    let raw = std::fs::read_to_string(cgroups.file_path(R::CpuCfsQuota, &pod).unwrap()).unwrap();
    assert_eq!(raw.trim(), "50000");

    // Loosening back to "no limit": parents first.
    let report = exec.apply(
        vec![
            w(&container, R::CpuCfsQuota, -1),
            w(&pod, R::CpuCfsQuota, -1),
            w(&pod, R::MemoryLimit, -1),
        ],
        t0 + Duration::from_secs(1),
    );
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(cgroups.read(R::CpuCfsQuota, &pod).unwrap(), CgroupValue::Int(-1));
    assert_eq!(cgroups.read(R::MemoryLimit, &pod).unwrap(), CgroupValue::Int(-1));

    // Burst, where the kernel has it: lowering the quota below the burst needs the clamp.
    if cgroups.is_supported(R::CpuCfsBurst, &pod).unwrap() {
        let report = exec.apply(
            vec![w(&pod, R::CpuCfsQuota, 80_000), w(&pod, R::CpuCfsBurst, 60_000)],
            t0 + Duration::from_secs(2),
        );
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        let report = exec.apply(vec![w(&pod, R::CpuCfsQuota, 30_000)], t0 + Duration::from_secs(3));
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        assert_eq!(
            cgroups.read(R::CpuCfsBurst, &pod).unwrap(),
            CgroupValue::Int(30_000)
        );
        assert_eq!(
            cgroups.read(R::CpuCfsQuota, &pod).unwrap(),
            CgroupValue::Int(30_000)
        );
    } else {
        println!("skipped: cpu.cfs_burst_us not supported by this kernel (burst part only)");
    }

    // Shares at both ends of the domain.
    for shares in [2, 262_144] {
        let report = exec.apply(vec![w(&pod, R::CpuShares, shares)], t0 + Duration::from_secs(10));
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        assert_eq!(
            cgroups.read(R::CpuShares, &pod).unwrap(),
            CgroupValue::Int(shares)
        );
    }

    // The kernel's own counters parse.
    cgroups.cpu_usage_ns(&pod).unwrap();
    cgroups.cpu_throttling(&pod).unwrap();
    cgroups.memory_stat(&pod).unwrap();
    let root = tree.path("cpu", "");
    drop(tree);
    assert!(!root.exists(), "test tree removed");
}

/// The kept-open cgroup file handles (`CgroupFile`) on real cgroupfs: a kept descriptor re-read
/// at offset 0 sees new values, a removed cgroup is reported missing (the kernel fails reads of
/// a removed kernfs file) and a cgroup created again at the same path is reopened.
#[test]
fn kept_cgroup_files_follow_a_recreated_cgroup_on_the_real_kernel() {
    let (tree, cgroups) = match host() {
        Ok((tree, cgroups)) => (tree, cgroups.with_fd_budget(FdBudget::new(8))),
        Err(reason) => {
            println!("skipped: {reason}");
            return;
        }
    };
    let dir = CgroupDir::new(tree.rel("fd")).unwrap();
    tree.mkdir("fd").unwrap();
    let budget = cgroups.fd_budget().clone();

    let mut shares = cgroups.file(R::CpuShares, &dir).unwrap();
    let mut usage = cgroups.file(R::CpuUsage, &dir).unwrap();
    let mut buf = Vec::new();
    cgroups
        .write(R::CpuShares, &dir, &CgroupValue::Int(2048))
        .unwrap();
    assert_eq!(shares.read_int(&mut buf).unwrap(), 2048);
    assert!(shares.is_kept());
    cgroups.write(R::CpuShares, &dir, &CgroupValue::Int(512)).unwrap();
    assert_eq!(
        shares.read_int(&mut buf).unwrap(),
        512,
        "pread at 0 regenerates the seq file"
    );
    assert_eq!(usage.read_u64(&mut buf).unwrap(), 0);
    assert!(usage.is_kept());
    assert_eq!(budget.in_use(), 2);

    // Removed: the kept descriptors fail, the handles report the cgroup missing and give their
    // slots back.
    tree.rmdir("fd").unwrap();
    assert!(matches!(
        shares.read_int(&mut buf),
        Err(SystemError::CgroupDirMissing(_))
    ));
    assert!(matches!(
        usage.read_u64(&mut buf),
        Err(SystemError::CgroupDirMissing(_))
    ));
    assert!(!shares.is_kept() && !usage.is_kept());
    assert_eq!(budget.in_use(), 0);

    // Created again at the same path: a fresh cgroup with the kernel's default shares, read
    // through reopened descriptors.
    tree.mkdir("fd").unwrap();
    assert_eq!(shares.read_int(&mut buf).unwrap(), 1024);
    assert_eq!(usage.read_u64(&mut buf).unwrap(), 0);
    assert!(shares.is_kept() && usage.is_kept());

    // Removed and created again between two reads, with the descriptors still kept: the stale
    // descriptor is detected and the new cgroup read.
    cgroups
        .write(R::CpuShares, &dir, &CgroupValue::Int(4096))
        .unwrap();
    assert_eq!(shares.read_int(&mut buf).unwrap(), 4096);
    tree.rmdir("fd").unwrap();
    tree.mkdir("fd").unwrap();
    assert_eq!(shares.read_int(&mut buf).unwrap(), 1024);
    assert!(shares.is_kept());
    assert_eq!(budget.in_use(), 2);
    drop((shares, usage));
    assert_eq!(budget.in_use(), 0);
}
