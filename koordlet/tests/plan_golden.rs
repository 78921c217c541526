//! `koordlet plan` output, byte for byte, on every plan fixture: the binary's stdout is compared
//! with `tests/fixtures/golden/<fixture>.<variant>.json`. Refactors of the decision core must keep
//! these files unchanged; a deliberate change of output regenerates them with
//! `KOORDLET_BLESS=1 cargo test -p koordlet --test plan_golden`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::path::{Path, PathBuf};
use std::process::Command;

/// Every YAML input under `tests/fixtures`.
const FIXTURES: &[&str] = &[
    "plan_node.yaml",
    "plan_seed000_burst.yaml",
    "plan_seed001_memory.yaml",
    "plan_seed002_satisfaction.yaml",
    "plan_memory_qos_sysctl.yaml",
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
    (
        "v1-cgroupfs-qos",
        &["--feature-gates", "CgroupReconcile=true,SystemConfig=true"],
    ),
    (
        "v2-cgroupfs-qos",
        &[
            "--cgroup-version",
            "v2",
            "--feature-gates",
            "CgroupReconcile=true,SystemConfig=true",
        ],
    ),
];

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

#[test]
fn plan_output_is_byte_identical_to_the_golden_files() {
    let bless = std::env::var_os("KOORDLET_BLESS").is_some();
    let golden_dir = fixtures_dir().join("golden");
    let mut mismatches = Vec::new();
    for fixture in FIXTURES {
        for (variant, extra) in VARIANTS {
            let got = plan_stdout(&fixtures_dir().join(fixture), extra);
            let stem = fixture.trim_end_matches(".yaml");
            let golden = golden_dir.join(format!("{stem}.{variant}.json"));
            if bless {
                std::fs::create_dir_all(&golden_dir).unwrap();
                std::fs::write(&golden, &got).unwrap();
                continue;
            }
            let want = std::fs::read(&golden)
                .unwrap_or_else(|e| panic!("{}: {e} (KOORDLET_BLESS=1 writes it)", golden.display()));
            if got != want {
                mismatches.push(format!(
                    "{}:\n--- golden\n{}\n--- got\n{}",
                    golden.display(),
                    String::from_utf8_lossy(&want),
                    String::from_utf8_lossy(&got)
                ));
            }
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}
