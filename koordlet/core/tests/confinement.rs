//! Property tests: no pod UID, container ID or relative cgroup path, however crafted (`..`,
//! `/`, NUL, very long, any Unicode), builds a cgroup directory outside the tree it belongs to.
#![allow(clippy::unwrap_used)]

use std::path::{Component, Path};

use koord_api::KubeQoSClass;
use koordlet_core::paths::{KUBE_QOS_CLASSES, MAX_CGROUP_NAME, MAX_CGROUP_PATH};
use koordlet_core::{CgroupDir, CgroupDriver, ContainerId, KubeCgroupPaths, PodUid};
use proptest::prelude::*;

const DRIVERS: [CgroupDriver; 2] = [CgroupDriver::Cgroupfs, CgroupDriver::Systemd];

/// Strings built from the pieces of an escape: separators, dots, NUL, runtime schemes and
/// ordinary characters, up to a few hundred bytes (past every length limit).
fn hostile() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("..".to_string()),
        Just("/".to_string()),
        Just(".".to_string()),
        Just("\0".to_string()),
        Just("containerd://".to_string()),
        Just("docker://".to_string()),
        Just("-".to_string()),
        Just("_".to_string()),
        "[a-f0-9]{1,70}",
        "\\PC{1,4}",
    ];
    prop::collection::vec(piece, 0..24).prop_map(|parts| parts.concat())
}

/// Every component a plain name: no `..`, no root, nothing the kernel would resolve elsewhere.
fn confined(dir: &CgroupDir) -> bool {
    dir.as_path().components().all(|c| match c {
        Component::Normal(name) => !name.as_encoded_bytes().contains(&0) && name.len() <= MAX_CGROUP_NAME,
        _ => false,
    }) && dir.as_path().as_os_str().len() <= MAX_CGROUP_PATH
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn pod_uids_build_one_directory_below_their_qos_dir(uid in hostile()) {
        if let Ok(uid) = PodUid::new(&uid) {
            for driver in DRIVERS {
                let paths = KubeCgroupPaths::new(driver);
                for qos in KUBE_QOS_CLASSES {
                    let qos_dir = paths.qos_dir(qos);
                    let pod_dir = paths.pod_dir(qos, &uid);
                    prop_assert!(confined(&pod_dir), "{pod_dir}");
                    prop_assert!(pod_dir.starts_with(&qos_dir));
                    prop_assert_eq!(pod_dir.depth(), qos_dir.depth() + 1);
                    let name = pod_dir.as_path().file_name().unwrap().to_str().unwrap();
                    prop_assert_eq!(paths.pod_uid_from_dir_name(name), Some(uid.clone()));
                }
            }
        }
    }

    #[test]
    fn container_ids_build_one_directory_below_their_pod_dir(id in hostile()) {
        let uid = PodUid::new("6f1e3a2b-1111-2222-3333-444455556666").unwrap();
        if let Ok(cid) = ContainerId::parse(&id) {
            for driver in DRIVERS {
                let paths = KubeCgroupPaths::new(driver);
                for qos in KUBE_QOS_CLASSES {
                    let pod_dir = paths.pod_dir(qos, &uid);
                    let dir = paths.container_dir(qos, &uid, &cid);
                    prop_assert!(confined(&dir), "{dir}");
                    prop_assert!(dir.starts_with(&pod_dir));
                    prop_assert_eq!(dir.depth(), pod_dir.depth() + 1);
                }
            }
        }
    }

    #[test]
    fn relative_paths_and_parents_stay_below_their_base(path in hostile(), parent in hostile()) {
        if let Ok(dir) = CgroupDir::new(&path) {
            prop_assert!(confined(&dir), "{dir}");
        }
        let base = CgroupDir::new("kubepods/besteffort").unwrap();
        if let Ok(dir) = base.join(&path) {
            prop_assert!(confined(&dir), "{dir}");
            prop_assert!(dir.starts_with(&base));
        }
        if let Ok(paths) = KubeCgroupPaths::with_parent(CgroupDriver::Systemd, Path::new(&parent)) {
            let dir = paths.qos_dir(KubeQoSClass::BestEffort);
            prop_assert!(confined(&dir), "{dir}");
        }
    }
}

#[test]
fn crafted_escapes_are_refused_with_a_reason() {
    let long = "a".repeat(300);
    for (input, reason) in [
        ("../../etc", "must be relative"),
        ("/etc/passwd", "must be relative"),
        ("a/../../b", "must be relative"),
        ("a\0b", "NUL"),
        (long.as_str(), "longer than 255"),
    ] {
        let err = CgroupDir::new(input).unwrap_err();
        assert!(err.to_string().contains(reason), "{input:?}: {err}");
    }
    assert!(
        CgroupDir::new("x/".repeat(2100))
            .unwrap_err()
            .to_string()
            .contains("4096")
    );
    for uid in ["..", "a/b", "a\0b", "../../x", &"u".repeat(129)] {
        assert!(PodUid::new(uid).is_err(), "{uid:?}");
    }
    for id in [
        "containerd://..",
        "containerd://a/b",
        "docker://a\0b",
        "containerd://../../x",
    ] {
        assert!(ContainerId::parse(id).is_err(), "{id:?}");
    }
}
