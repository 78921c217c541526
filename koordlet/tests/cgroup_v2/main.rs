//! Tier 3 on a real cgroup v2 kernel: koordlet's system layer, executor and QoS writes on the
//! unified hierarchy, and the v2-only kernel rules they meet.
//!
//! The host's controllers are all bound to cgroup v1, so [`cgroup_v2_koordlet_on_a_real_v2_kernel`]
//! boots a small qemu VM (`scripts/v2-vm.sh`: Debian's cloud kernel, `cgroup_no_v1=all`) and
//! re-runs this very test binary inside it with the filter `cgroup_v2_vm_` and `--ignored`.
//! The in-VM tests are `#[ignore]`d on the host (they would write the host's cgroups) and
//! print `skipped:` if run outside the VM by hand. Where the VM cannot start, the driver prints
//! `skipped: <reason>` and passes.

// Test harness helpers live outside `#[test]` fns, where clippy's test allowances do not reach.
#![allow(clippy::expect_used, clippy::unwrap_used)]

#[path = "../common/mod.rs"]
mod common;
mod cpu_qos;
mod fast_suppress;
mod kernel_rules;
mod qos;
mod system;
mod tree;

use std::process::Command;
use std::time::Duration;

use koord_test_support::vm::{VmError, inside_v2_vm, run_in_v2_vm};

/// The in-VM tests start with this guard: outside the VM they would touch the host's cgroups.
macro_rules! in_vm_only {
    () => {
        if !koord_test_support::vm::inside_v2_vm() {
            println!("skipped: not inside the cgroup v2 VM (cargo test cgroup_v2 boots it)");
            return;
        }
    };
}
pub(crate) use in_vm_only;

/// The in-VM tests this binary holds, from its own `--list`.
fn in_vm_tests() -> Vec<String> {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(exe)
        .args(["--list", "--ignored", "cgroup_v2_vm_"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_suffix(": test"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn cgroup_v2_koordlet_on_a_real_v2_kernel() {
    if inside_v2_vm() {
        return;
    }
    let tests = in_vm_tests();
    assert!(tests.len() >= 5, "in-VM tests not found: {tests:?}");
    let exe = std::env::current_exe().unwrap();
    let args = ["cgroup_v2_vm_", "--ignored", "--test-threads=1", "--show-output"];
    let run = match run_in_v2_vm(&exe, &args, &[("RUST_BACKTRACE", "1")], Duration::from_secs(900)) {
        Ok(run) => run,
        Err(VmError::Unavailable { reason }) => {
            println!("skipped: {reason}");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    println!("{}", run.cgroup2_mount().unwrap_or("(no cgroup2 mount line)"));
    println!("{}", run.output);
    println!("{}", run.runner_log.trim());
    println!(
        "cgroup v2 VM: {} tests in {:.1} s (boot, run, power-off)",
        tests.len(),
        run.elapsed.as_secs_f64()
    );
    assert_eq!(run.exit_code, 0, "in-VM tests failed (output above)");
    for name in &tests {
        assert!(
            run.output.contains(&format!("test {name} ... ok")),
            "{name} did not pass in the VM"
        );
    }
    assert!(
        run.cgroup2_mount()
            .is_some_and(|l| l.contains("/sys/fs/cgroup cgroup2")),
        "cgroup2 not mounted at /sys/fs/cgroup in the VM"
    );
}
