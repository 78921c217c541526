//! koordlet's kernel-facing parsers and its cgroup name arithmetic.

use std::path::{Component, Path};

use koordlet::system::cgroup_stats::{CpuThrottling, MemoryStat, parse_flat_keyed};
use koordlet::system::meminfo::Meminfo;
use koordlet::system::proc_stat::ProcStat;
use koordlet::system::psi::PsiStats;
use koordlet::system::resctrl::{parse_cpuinfo, parse_ids, resctrl_mount};
use koordlet::system::resource::{decode, encode};
use koordlet::system::{
    CgroupDir, CgroupDriver, CgroupResource, CgroupVersion, ContainerId, CpuSet, KUBE_QOS_CLASSES,
    KubeCgroupPaths, PodUid,
};
use koordlet_core::resctrl::Schemata;

use crate::{choose, text};

/// Input: a selector byte, then the content of one kernel file. Values read from cgroup files
/// are also encoded back (v2 `cpu.max` keeps the other field of the current content).
#[allow(clippy::panic)]
pub fn cgroup_files(data: &[u8]) {
    let (which, rest) = choose(data, 9);
    let text = text(rest);
    match which {
        0 => {
            let _ = parse_flat_keyed(&text, "memory.stat");
        }
        1 => {
            for version in [CgroupVersion::V1, CgroupVersion::V2] {
                if let (Ok(a), Ok(b)) = (
                    CpuThrottling::parse(&text, version),
                    CpuThrottling::parse(&text, version),
                ) {
                    let _ = b.throttled_ratio_since(&a);
                }
            }
        }
        2 => {
            for version in [CgroupVersion::V1, CgroupVersion::V2] {
                if let Ok(stat) = MemoryStat::parse(&text, version) {
                    let usage = stat.usage_without_page_cache();
                    let _ = stat.working_set(usage);
                }
            }
        }
        3 => {
            let _ = Meminfo::parse(&text);
        }
        4 => {
            let _ = ProcStat::parse(&text);
        }
        5 => {
            let _ = PsiStats::parse(&text);
        }
        6 => {
            if let Ok(cpus) = CpuSet::parse(&text) {
                let printed = cpus.to_string();
                match CpuSet::parse(&printed) {
                    Ok(back) if back == cpus => {}
                    other => panic!("{text:?} -> {printed:?} -> {other:?}"),
                }
            }
        }
        _ => {
            for resource in CgroupResource::ALL {
                for version in [CgroupVersion::V1, CgroupVersion::V2] {
                    if let Ok(value) = decode(resource, version, &text) {
                        let _ = encode(resource, version, &value, Some(&text));
                    }
                }
            }
        }
    }
}

/// Input: a selector byte, then a schemata file, /proc/cpuinfo, /proc/mounts or a task list.
pub fn resctrl(data: &[u8]) {
    let (which, rest) = choose(data, 4);
    let text = text(rest);
    match which {
        0 => {
            if let Ok(schemata) = Schemata::parse(&text) {
                for line in &schemata.lines {
                    let _ = line.is_cache();
                    let _ = line.is_satisfied_by(line);
                    let _ = schemata.line(&line.resource);
                }
            }
        }
        1 => {
            let _ = parse_cpuinfo(&text);
        }
        2 => {
            let _ = resctrl_mount(&text, Path::new("/sys/fs/resctrl"));
        }
        _ => {
            let _ = parse_ids(Path::new("tasks"), &text);
        }
    }
}

/// Input: a selector byte, then a pod UID, container ID or relative cgroup path as a pod,
/// a runtime or a ConfigMap (host applications) may give it. Whatever is accepted must build
/// directories that are relative, free of `..`, and one level below their parent.
#[allow(clippy::panic)]
pub fn cgroup_names(data: &[u8]) {
    let (which, rest) = choose(data, 3);
    let text = text(rest);
    let uid = PodUid::new("6f1e3a2b-1111-2222-3333-444455556666");
    let cid = ContainerId::parse("containerd://abc123");
    let (Ok(uid), Ok(cid)) = (uid, cid) else {
        panic!("the fixed UID and container ID are valid");
    };
    let mut dirs: Vec<(CgroupDir, CgroupDir)> = Vec::new();
    for driver in [CgroupDriver::Cgroupfs, CgroupDriver::Systemd] {
        let paths = KubeCgroupPaths::new(driver);
        for qos in KUBE_QOS_CLASSES {
            match which {
                0 => {
                    if let Ok(uid) = PodUid::new(&text) {
                        dirs.push((paths.qos_dir(qos), paths.pod_dir(qos, &uid)));
                    }
                }
                1 => {
                    if let Ok(cid) = ContainerId::parse(&text) {
                        dirs.push((paths.pod_dir(qos, &uid), paths.container_dir(qos, &uid, &cid)));
                    }
                }
                _ => {
                    if let Ok(dir) = paths.pod_dir(qos, &uid).join(text.as_ref()) {
                        dirs.push((paths.pod_dir(qos, &uid), dir));
                    }
                    let _ = paths.container_dir(qos, &uid, &cid);
                }
            }
        }
    }
    for (parent, dir) in dirs {
        let confined = dir
            .as_path()
            .components()
            .all(|c| matches!(c, Component::Normal(_)));
        if !confined || !dir.starts_with(&parent) {
            panic!("{text:?} built {dir} outside {parent}");
        }
        if which != 2 && dir.depth() != parent.depth() + 1 {
            panic!("{text:?} built {dir}, more than one level below {parent}");
        }
    }
}
