//! Tier 2: the system layer against fake cgroup trees (v1 and v2, cgroupfs and systemd) in temp
//! dirs.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

mod common;

use koord_api::KubeQoSClass;
use std::path::Path;

use common::{FakeHost, LogCapture, cid, uid};
use koordlet::system::{
    CgroupDir, CgroupDriver, CgroupMode, CgroupResource as R, CgroupValue, CgroupVersion, Cgroups, CpuSet,
    SystemError,
};

const DRIVERS: [CgroupDriver; 2] = [CgroupDriver::Cgroupfs, CgroupDriver::Systemd];
const VERSIONS: [CgroupVersion; 2] = [CgroupVersion::V1, CgroupVersion::V2];

fn detect(host: &FakeHost) -> Cgroups {
    Cgroups::detect(&host.roots).unwrap()
}

#[test]
fn detection_from_the_mount_table_and_the_driver_from_the_tree() {
    for version in VERSIONS {
        for driver in DRIVERS {
            let host = FakeHost::new(version, driver);
            let cgroups = detect(&host);
            assert_eq!(cgroups.version(), version);
            assert_eq!(cgroups.layout().source, "mountinfo");
            assert_eq!(
                koordlet::system::detect_driver(&host.roots.cgroup, cgroups.layout(), Path::new("")),
                Some(driver)
            );
        }
    }
    // Without a mount table the directory heuristic decides.
    let host = FakeHost::new(CgroupVersion::V2, CgroupDriver::Systemd);
    std::fs::remove_file(host.roots.proc.join("self/mountinfo")).unwrap();
    assert_eq!(detect(&host).layout().source, "directory");
    assert_eq!(detect(&host).layout().mode, CgroupMode::V2);
}

#[test]
fn every_qos_class_at_every_level_resolves_to_the_kernel_files() {
    for version in VERSIONS {
        for driver in DRIVERS {
            let host = FakeHost::new(version, driver);
            let cgroups = detect(&host);
            for qos in koordlet::system::KUBE_QOS_CLASSES {
                for dir in [
                    host.paths.qos_dir(qos),
                    host.paths.pod_dir(qos, &uid()),
                    host.paths.container_dir(qos, &uid(), &cid()),
                ] {
                    for r in [
                        R::CpuShares,
                        R::CpuCfsQuota,
                        R::CpuCfsPeriod,
                        R::CpuCfsBurst,
                        R::CpusetCpus,
                        R::CpuUsage,
                        R::MemoryLimit,
                        R::MemoryStat,
                    ] {
                        assert!(
                            cgroups.is_supported(r, &dir).unwrap(),
                            "{version:?} {driver:?} {qos:?} {dir} {r}"
                        );
                    }
                    let quota = cgroups.file_path(R::CpuCfsQuota, &dir).unwrap();
                    let expected = match version {
                        CgroupVersion::V1 => host
                            .roots
                            .cgroup
                            .join("cpu")
                            .join(dir.as_path())
                            .join("cpu.cfs_quota_us"),
                        CgroupVersion::V2 => host.roots.cgroup.join(dir.as_path()).join("cpu.max"),
                    };
                    assert_eq!(quota, expected);
                }
            }
        }
    }
}

#[test]
fn conversions_at_their_boundaries_through_the_files() {
    let be = |host: &FakeHost| host.paths.pod_dir(KubeQoSClass::BestEffort, &uid());
    let host = FakeHost::new(CgroupVersion::V2, CgroupDriver::Systemd);
    let cg = detect(&host);
    let dir = be(&host);
    let rel = dir.as_path();
    for (shares, weight) in [(2, "1"), (262_144, "10000"), (1024, "39")] {
        cg.write(R::CpuShares, &dir, &CgroupValue::Int(shares)).unwrap();
        assert_eq!(host.read("", rel, "cpu.weight"), weight);
    }
    cg.write(R::CpuCfsQuota, &dir, &CgroupValue::Int(50_000)).unwrap();
    assert_eq!(host.read("", rel, "cpu.max"), "50000 100000");
    cg.write(R::CpuCfsPeriod, &dir, &CgroupValue::Int(200_000))
        .unwrap();
    assert_eq!(host.read("", rel, "cpu.max"), "50000 200000");
    cg.write(R::CpuCfsQuota, &dir, &CgroupValue::Int(-1)).unwrap();
    assert_eq!(host.read("", rel, "cpu.max"), "max 200000");
    assert_eq!(cg.read(R::CpuCfsQuota, &dir).unwrap(), CgroupValue::Int(-1));
    cg.write(R::CpuCfsBurst, &dir, &CgroupValue::Int(10_000)).unwrap();
    assert_eq!(host.read("", rel, "cpu.max.burst"), "10000");
    cg.write(R::MemoryLimit, &dir, &CgroupValue::Int(1 << 30))
        .unwrap();
    assert_eq!(host.read("", rel, "memory.max"), "1073741824");
    cg.write(R::MemoryLimit, &dir, &CgroupValue::Int(-1)).unwrap();
    assert_eq!(host.read("", rel, "memory.max"), "max");

    let host = FakeHost::new(CgroupVersion::V1, CgroupDriver::Cgroupfs);
    let cg = detect(&host);
    let dir = be(&host);
    let rel = dir.as_path();
    assert_eq!(
        cg.read(R::MemoryLimit, &dir).unwrap(),
        CgroupValue::Int(-1),
        "v1 unlimited reads as -1"
    );
    // Writing -1 over the v1 "unlimited" number is recognised as no change.
    assert!(
        cg.write(R::MemoryLimit, &dir, &CgroupValue::Int(-1))
            .unwrap()
            .unchanged
    );
    cg.write(R::CpuShares, &dir, &CgroupValue::Int(2)).unwrap();
    assert_eq!(host.read("cpu", rel, "cpu.shares"), "2");
    // A cpuset equal in meaning is not rewritten.
    assert!(
        cg.write(
            R::CpusetCpus,
            &dir,
            &CgroupValue::Cpus(CpuSet::from_cpus([0, 1, 2, 3]))
        )
        .unwrap()
        .unchanged
    );
}

#[test]
fn values_outside_the_domain_never_reach_the_file() {
    for version in VERSIONS {
        let host = FakeHost::new(version, CgroupDriver::Cgroupfs);
        let cg = detect(&host);
        let dir = host.paths.qos_dir(KubeQoSClass::BestEffort);
        for (r, bad) in [
            (R::CpuShares, 1),
            (R::CpuShares, 262_145),
            (R::CpuCfsQuota, 999),
            (R::CpuCfsQuota, -2),
            (R::CpuCfsPeriod, 1_000_001),
            (R::CpuCfsBurst, -1),
        ] {
            let before = std::fs::read_to_string(cg.file_path(r, &dir).unwrap()).unwrap();
            let err = cg.write(r, &dir, &CgroupValue::Int(bad)).unwrap_err();
            assert!(
                matches!(err, SystemError::InvalidValue { .. }),
                "{r} {bad}: {err}"
            );
            assert_eq!(
                std::fs::read_to_string(cg.file_path(r, &dir).unwrap()).unwrap(),
                before
            );
        }
        assert!(matches!(
            cg.write(R::MemoryUsage, &dir, &CgroupValue::Int(1)),
            Err(SystemError::InvalidValue { .. })
        ));
    }
}

#[test]
fn unsupported_files_are_logged_once_and_skipped() {
    let host = FakeHost::new(CgroupVersion::V1, CgroupDriver::Cgroupfs);
    let cg = detect(&host);
    let logs = LogCapture::default();
    logs.run(|| {
        for qos in koordlet::system::KUBE_QOS_CLASSES {
            let dir = host.paths.pod_dir(qos, &uid());
            for _ in 0..50 {
                let err = cg.write(R::CpuIdle, &dir, &CgroupValue::Int(1)).unwrap_err();
                assert!(err.is_skippable(), "{err}");
                assert!(!cg.is_supported(R::CpuIdle, &dir).unwrap());
            }
        }
        // memory.min does not exist on a stock v1 kernel either.
        let _ = cg.write(R::MemoryMin, &host.paths.kubepods_dir(), &CgroupValue::Int(0));
    });
    let text = logs.text();
    assert_eq!(text.matches("unsupported").count(), 2, "{text}");
    assert!(text.contains("cpu.idle") && text.contains("memory.min"));
    assert_eq!(cg.unsupported_reported(), 2);
}

#[test]
fn missing_cgroups_are_skippable_and_not_cached() {
    let host = FakeHost::new(CgroupVersion::V2, CgroupDriver::Cgroupfs);
    let cg = detect(&host);
    let dir = CgroupDir::new("kubepods/besteffort/podgone").unwrap();
    let err = cg.is_supported(R::CpuCfsQuota, &dir).unwrap_err();
    assert!(matches!(err, SystemError::CgroupDirMissing(_)));
    host.add_cgroup(dir.as_path());
    assert!(
        cg.is_supported(R::CpuCfsQuota, &dir).unwrap(),
        "created later: probed again"
    );
    assert!(CgroupDir::new("../escape").is_err());
}

#[test]
fn stat_readers_on_both_versions() {
    for version in VERSIONS {
        let host = FakeHost::new(version, CgroupDriver::Systemd);
        let cg = detect(&host);
        let dir = host.paths.container_dir(KubeQoSClass::Burstable, &uid(), &cid());
        assert_eq!(cg.cpu_usage_ns(&dir).unwrap(), 5_000_000_000);
        assert_eq!(cg.memory_usage_bytes(&dir).unwrap(), 1_048_576);
        let stat = cg.memory_stat(&dir).unwrap();
        assert_eq!((stat.inactive_file, stat.usage_without_page_cache()), (3, 8));
        let thr = cg.cpu_throttling(&dir).unwrap();
        assert_eq!(
            (thr.nr_periods, thr.nr_throttled, thr.throttled_ns),
            (10, 2, 3000)
        );
        assert_eq!(cg.effective_cpus(&dir).unwrap().to_string(), "0-3");
        let own = if version == CgroupVersion::V1 { "0-3" } else { "" };
        assert_eq!(
            cg.cpuset_cpus(&dir).unwrap().to_string(),
            own,
            "v2: empty means the parent's"
        );
    }
    let host = FakeHost::new(CgroupVersion::V2, CgroupDriver::Systemd);
    let cg = detect(&host);
    let psi = cg.pressure(R::CpuPressure, &host.paths.kubepods_dir()).unwrap();
    assert_eq!(psi.some.avg10, 1.0);
    assert!(
        cg.pressure(R::MemoryPressure, &host.paths.kubepods_dir())
            .unwrap_err()
            .is_skippable()
    );
}

#[test]
fn hybrid_reads_pressure_from_the_unified_mount() {
    let host = FakeHost::new(CgroupVersion::V1, CgroupDriver::Cgroupfs);
    let cg_root = &host.roots.cgroup;
    std::fs::create_dir_all(cg_root.join("unified/kubepods")).unwrap();
    std::fs::write(cg_root.join("unified/cgroup.controllers"), "").unwrap();
    std::fs::write(
        cg_root.join("unified/kubepods/cpu.pressure"),
        "some avg10=2.50 avg60=0.00 avg300=0.00 total=7\n",
    )
    .unwrap();
    let mut mountinfo = std::fs::read_to_string(host.roots.proc.join("self/mountinfo")).unwrap();
    mountinfo.push_str(&format!(
        "41 31 0:38 / {}/unified rw - cgroup2 cgroup2 rw\n",
        cg_root.display()
    ));
    std::fs::write(host.roots.proc.join("self/mountinfo"), mountinfo).unwrap();
    let cg = detect(&host);
    assert_eq!(cg.layout().mode, CgroupMode::Hybrid);
    assert_eq!(cg.version(), CgroupVersion::V1);
    assert_eq!(
        cg.pressure(R::CpuPressure, &host.paths.kubepods_dir())
            .unwrap()
            .some
            .avg10,
        2.5
    );
    assert!(
        cg.is_supported(R::CpuCfsQuota, &host.paths.kubepods_dir())
            .unwrap()
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(16))]
    #[test]
    fn arbitrary_bytes_in_any_cgroup_file_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
        for version in VERSIONS {
            let host = FakeHost::new(version, CgroupDriver::Cgroupfs);
            let cg = detect(&host);
            let dir = host.paths.kubepods_dir();
            for r in R::ALL {
                if let Ok(path) = cg.file_path(r, &dir)
                    && path.exists()
                {
                    std::fs::write(&path, &bytes).unwrap();
                }
            }
            for r in R::ALL {
                let _ = cg.read(r, &dir);
                let _ = cg.write(r, &dir, &CgroupValue::Int(1000));
            }
            let _ = cg.cpu_usage_ns(&dir);
            let _ = cg.memory_stat(&dir);
            let _ = cg.cpu_throttling(&dir);
            let _ = cg.cpuset_cpus(&dir);
            let _ = cg.pressure(R::CpuPressure, &dir);
        }
    }
}

/// The cpuset hook's view of a pod cgroup: found from the runtime's cgroup parent (both drivers),
/// with the CPUs a container's set must fit in on v1 and none on v2; any other parent refused.
#[test]
fn pod_cgroup_of_a_runtime_sandbox() {
    use koordlet::nri::api::{LinuxPodSandbox, PodSandbox};
    use koordlet::nri::{NodePodCgroups, PodCgroups};
    for version in VERSIONS {
        for driver in DRIVERS {
            let host = FakeHost::new(version, driver);
            let dir = host.paths.pod_dir(KubeQoSClass::BestEffort, &uid());
            if version == CgroupVersion::V1 {
                std::fs::write(host.file("cpuset", dir.as_path(), "cpuset.cpus"), "1-2\n").unwrap();
            }
            let pod_cgroups = NodePodCgroups::new(std::sync::Arc::new(detect(&host)), host.paths.clone());
            let parent = match driver {
                CgroupDriver::Cgroupfs => format!("/{dir}"),
                CgroupDriver::Systemd => dir.as_path().file_name().unwrap().to_string_lossy().into_owned(),
            };
            let sandbox = |uid: &str, parent: &str| PodSandbox {
                uid: uid.into(),
                linux: Some(LinuxPodSandbox {
                    cgroup_parent: parent.into(),
                }),
                ..PodSandbox::default()
            };
            let found = pod_cgroups.pod_cgroup(&sandbox(uid().as_str(), &parent)).unwrap();
            assert_eq!(found.kube_qos, KubeQoSClass::BestEffort, "{version:?} {driver:?}");
            let want = (version == CgroupVersion::V1).then(|| CpuSet::parse("1-2").unwrap());
            assert_eq!(found.fits_in, want, "{version:?} {driver:?}");
            // Another pod's UID, a parent outside kubepods, a bad UID: refused with a reason.
            for (uid, parent) in [
                ("other", parent.as_str()),
                (uid().as_str(), "/system.slice"),
                ("../x", "/"),
            ] {
                let e = pod_cgroups.pod_cgroup(&sandbox(uid, parent)).unwrap_err();
                assert!(!e.is_empty());
            }
        }
    }
}
