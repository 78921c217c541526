//! `koordlet plan` output, byte for byte, on every plan fixture: the binary's stdout is compared
//! with `tests/fixtures/golden/<fixture>.<variant>.json`, also with `--cgroup-root` on a fake
//! cgroup tree the test builds. Refactors of the decision core must keep these files unchanged;
//! a deliberate change of output regenerates them with
//! `KOORDLET_BLESS=1 cargo test -p koordlet --test plan_golden`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use koord_api::KubeQoSClass;
use koordlet::system::{CgroupDriver, CgroupVersion, ContainerId, PodUid};

/// Every YAML input under `tests/fixtures`.
const FIXTURES: &[&str] = &[
    "plan_cpu_qos.yaml",
    "plan_node.yaml",
    "plan_seed000_burst.yaml",
    "plan_seed001_memory.yaml",
    "plan_seed002_satisfaction.yaml",
    "plan_cpuset_policy.yaml",
];

/// The flag sets each fixture is planned with: name, extra arguments.
const VARIANTS: &[(&str, &[&str])] = &[
    ("v1-cgroupfs", &[]),
    (
        "v1-cgroupfs-evict",
        &["--feature-gates", "BEMemoryEvict=true,BECPUEvict=true"],
    ),
    (
        "v2-systemd-evict",
        &[
            "--cgroup-version",
            "v2",
            "--cgroup-driver",
            "systemd",
            "--feature-gates",
            "BEMemoryEvict=true,BECPUEvict=true",
        ],
    ),
];

/// Fixtures planned with flags of their own as well: fixture, variant name, extra arguments.
const EXTRA: &[(&str, &str, &[&str])] = &[(
    "plan_cpu_qos.yaml",
    "v2-systemd-coresched",
    &[
        "--cgroup-version",
        "v2",
        "--cgroup-driver",
        "systemd",
        "--feature-gates",
        "CoreSched=true",
    ],
)];

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn plan_stdout(fixture: &Path, extra: &[&str]) -> Vec<u8> {
    let out = Command::new(env!("CARGO_BIN_EXE_koordlet"))
        .arg("plan")
        .arg("-f")
        .arg(fixture)
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "koordlet plan -f {} {extra:?} failed: {}",
        fixture.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Compares `got` with the golden file `name` (or writes it when blessing); a mismatch is
/// returned as the text to fail with.
fn check_golden(name: &str, got: &[u8]) -> Option<String> {
    let golden_dir = fixtures_dir().join("golden");
    let golden = golden_dir.join(name);
    if std::env::var_os("KOORDLET_BLESS").is_some() {
        std::fs::create_dir_all(&golden_dir).unwrap();
        std::fs::write(&golden, got).unwrap();
        return None;
    }
    let want = std::fs::read(&golden)
        .unwrap_or_else(|e| panic!("{}: {e} (KOORDLET_BLESS=1 writes it)", golden.display()));
    (got != want).then(|| {
        format!(
            "{}:\n--- golden\n{}\n--- got\n{}",
            golden.display(),
            String::from_utf8_lossy(&want),
            String::from_utf8_lossy(got)
        )
    })
}

#[test]
fn plan_output_is_byte_identical_to_the_golden_files() {
    let mut mismatches = Vec::new();
    let runs = FIXTURES
        .iter()
        .flat_map(|f| VARIANTS.iter().map(move |(v, e)| (*f, *v, *e)))
        .chain(EXTRA.iter().copied());
    for (fixture, variant, extra) in runs {
        let got = plan_stdout(&fixtures_dir().join(fixture), extra);
        let stem = fixture.trim_end_matches(".yaml");
        mismatches.extend(check_golden(&format!("{stem}.{variant}.json"), &got));
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

/// A fake cgroup tree for `plan_node.yaml` as a node would have it mid-suppress: the BE level
/// already held to a quota and two CPUs, the BE pod's containers and the LS pod's cgroup as
/// the kubelet made them.
fn plan_node_tree(version: CgroupVersion) -> common::FakeHost {
    let host = common::FakeHost::new(version, CgroupDriver::Cgroupfs);
    let be_uid = PodUid::new("aaaaaaaa-0000-0000-0000-000000000001").unwrap();
    let ls_uid = PodUid::new("bbbbbbbb-0000-0000-0000-000000000002").unwrap();
    host.add_cgroup(host.paths.pod_dir(KubeQoSClass::BestEffort, &be_uid).as_path());
    for id in ["containerd://aaaa1", "containerd://aaaa2"] {
        let cid = ContainerId::parse(id).unwrap();
        let dir = host.paths.container_dir(KubeQoSClass::BestEffort, &be_uid, &cid);
        host.add_cgroup(dir.as_path());
    }
    host.add_cgroup(host.paths.pod_dir(KubeQoSClass::Burstable, &ls_uid).as_path());
    let be = host.paths.qos_dir(KubeQoSClass::BestEffort);
    let files: &[(&str, &str, &str)] = match version {
        CgroupVersion::V1 => &[
            ("cpu", "cpu.cfs_quota_us", "150000\n"),
            ("cpuset", "cpuset.cpus", "2-3\n"),
        ],
        CgroupVersion::V2 => &[("", "cpu.max", "150000 100000\n"), ("", "cpuset.cpus", "2-3\n")],
    };
    for (controller, file, value) in files {
        std::fs::write(host.file(controller, be.as_path(), file), value).unwrap();
    }
    host
}

/// `--cgroup-root`: each write carries the file's content now (in the version's own units),
/// read from the tree; nothing of the tree's location reaches the output, so two trees built
/// alike plan byte-identically.
#[test]
fn plan_with_a_cgroup_root_is_byte_identical_to_the_golden_files() {
    let mut mismatches = Vec::new();
    for (variant, version, extra) in [
        ("v1-cgroupfs", CgroupVersion::V1, &[][..]),
        ("v2-cgroupfs", CgroupVersion::V2, &["--cgroup-version", "v2"][..]),
    ] {
        let outputs: Vec<Vec<u8>> = (0..2)
            .map(|_| {
                let host = plan_node_tree(version);
                let root = host.roots.cgroup.to_str().unwrap().to_owned();
                let mut args = vec!["--cgroup-root", root.as_str()];
                args.extend_from_slice(extra);
                plan_stdout(&fixtures_dir().join("plan_node.yaml"), &args)
            })
            .collect();
        assert_eq!(
            outputs[0], outputs[1],
            "{variant}: the output depends on the tree's location"
        );
        let text = String::from_utf8_lossy(&outputs[0]);
        assert!(
            text.contains("\"current\""),
            "{variant}: no current value read:\n{text}"
        );
        mismatches.extend(check_golden(
            &format!("plan_node.{variant}-cgroup-root.json"),
            &outputs[0],
        ));
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}
