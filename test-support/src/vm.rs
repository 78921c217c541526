//! Runs a host-built binary inside a qemu VM booted on a pure cgroup v2 kernel.
//!
//! The host's cgroup controllers are bound to v1, so the v2 rules (`cpu.max`, `cpu.max.burst`,
//! `cpuset.cpus.effective`, the no-internal-processes rule, PSI per cgroup) can only be met on
//! another kernel. `scripts/v2-vm.sh` fetches that kernel (Debian's cloud kernel), a static
//! busybox and qemu, builds an initramfs holding the binary and its shared libraries, boots it
//! with `cgroup_no_v1=all` and reports the binary's output and exit code. This module drives the
//! script with a deadline and kills the VM's whole process group when the run ends early, times
//! out or the caller panics.
//!
//! The usual pattern is a test that re-runs its own test binary (`std::env::current_exe()`)
//! inside the VM with a filter selecting the in-VM half; [`inside_v2_vm`] tells the two halves
//! apart.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Set to `1` by the VM's `/init` for the command it runs.
pub const IN_VM_ENV: &str = "KOORD_CGROUP_V2_VM";

/// The script's exit code when the VM cannot start on this machine.
const EXIT_UNAVAILABLE: i32 = 77;

/// Why a VM run gave no result.
#[derive(Debug, thiserror::Error)]
pub enum VmError {
    /// This machine cannot boot the VM (no qemu and no way to install it, no kernel package).
    /// Tests report this as `skipped: <reason>`.
    #[error("the cgroup v2 VM cannot start here: {reason}")]
    Unavailable {
        /// The script's explanation.
        reason: String,
    },
    /// The runner script itself could not be started.
    #[error("cannot start {script}")]
    Spawn {
        /// The script path.
        script: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Waiting for the script failed.
    #[error("waiting for the cgroup v2 VM failed")]
    Wait(#[source] std::io::Error),
    /// The VM did not finish within the deadline; it was killed.
    #[error("the cgroup v2 VM did not finish within {timeout:?}; output so far:\n{output}\n{stderr}")]
    Timeout {
        /// The deadline.
        timeout: Duration,
        /// What the command printed before the VM was killed.
        output: String,
        /// The script's own messages.
        stderr: String,
    },
    /// The VM ran but reported no exit code (kernel panic, init failure).
    #[error("the cgroup v2 VM reported no exit code (runner status {status:?}):\n{output}\n{stderr}")]
    NoExitCode {
        /// The script's exit status.
        status: Option<i32>,
        /// Whatever the command printed.
        output: String,
        /// The script's messages, including the tail of the kernel console.
        stderr: String,
    },
}

/// What one VM run reported.
#[derive(Debug, Clone)]
pub struct VmRun {
    /// The command's exit code inside the VM.
    pub exit_code: i32,
    /// The command's stdout and stderr, interleaved, after the VM's cgroup2 mount line.
    pub output: String,
    /// The runner's own messages (downloads, VM wall time).
    pub runner_log: String,
    /// Boot, run and power-off, as the host saw it.
    pub elapsed: Duration,
}

impl VmRun {
    /// The VM's `cgroup2 mount: ...` line (mount options and kernel release), for test logs.
    pub fn cgroup2_mount(&self) -> Option<&str> {
        self.output.lines().find(|l| l.starts_with("cgroup2 mount:"))
    }
}

/// True in the command the VM runs (see [`IN_VM_ENV`]).
pub fn inside_v2_vm() -> bool {
    std::env::var(IN_VM_ENV).is_ok_and(|v| v == "1")
}

/// The runner script in this workspace.
pub fn script_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/v2-vm.sh")
}

/// Boots the VM, runs `binary args` inside it and returns its output and exit code. `env`
/// pairs are exported inside the VM (values must not contain spaces). The deadline covers the
/// first-time downloads too; at the deadline the VM is killed.
pub fn run_in_v2_vm(
    binary: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    timeout: Duration,
) -> Result<VmRun, VmError> {
    let script = script_path();
    let vm_env = env
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ");
    let mut command = Command::new("bash");
    command
        .arg(&script)
        .arg("run")
        .arg(binary)
        .args(args)
        .env("KOORD_VM_TIMEOUT", timeout.as_secs().max(1).to_string())
        .env("KOORD_VM_ENV", vm_env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    let started = Instant::now();
    let child = command.spawn().map_err(|source| VmError::Spawn {
        script: script.clone(),
        source,
    })?;
    let mut group = ProcessGroup { child };
    let stdout = drain(group.child.stdout.take());
    let stderr = drain(group.child.stderr.take());
    // The script's own timeout covers the VM; this one covers the script (downloads included).
    let deadline = started + timeout + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = group.child.try_wait().map_err(VmError::Wait)? {
            break Some(status);
        }
        if Instant::now() >= deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let Some(status) = status else {
        drop(group);
        return Err(VmError::Timeout {
            timeout,
            output: join(stdout),
            stderr: join(stderr),
        });
    };
    let elapsed = started.elapsed();
    let output = join(stdout);
    let runner_log = join(stderr);
    if status.code() == Some(EXIT_UNAVAILABLE) {
        let reason = runner_log
            .lines()
            .find_map(|l| l.strip_prefix("v2-vm: unavailable: "))
            .unwrap_or("the runner gave no reason")
            .to_string();
        return Err(VmError::Unavailable { reason });
    }
    let exit_code = output
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("KOORD_VM_EXIT="))
        .and_then(|code| code.trim().parse().ok());
    match exit_code {
        Some(exit_code) => Ok(VmRun {
            exit_code,
            output,
            runner_log,
            elapsed,
        }),
        None => Err(VmError::NoExitCode {
            status: status.code(),
            output,
            stderr: runner_log,
        }),
    }
}

/// The runner script and everything it started (qemu, `timeout`): killed together on drop, so
/// no VM outlives a failed or panicking test.
struct ProcessGroup {
    child: Child,
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let pid = rustix::process::Pid::from_child(&self.child);
            // The group may already be gone between the check and the kill: nothing to do then.
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
        let _ = self.child.wait();
    }
}

fn drain(pipe: Option<impl Read + Send + 'static>) -> Option<JoinHandle<String>> {
    pipe.map(|mut pipe| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            // A read error ends the capture; what was read so far is still reported.
            let _ = pipe.read_to_end(&mut bytes);
            String::from_utf8_lossy(&bytes).into_owned()
        })
    })
}

fn join(handle: Option<JoinHandle<String>>) -> String {
    handle.and_then(|h| h.join().ok()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alive(pid: u32) -> bool {
        // A killed child of a reaper-less init may linger as a zombie: that is not running.
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| !s.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'))
            .unwrap_or(false)
    }

    /// What a failing or timed-out test relies on: dropping the guard kills the runner and
    /// everything it started in its group (qemu there), not only the direct child.
    #[test]
    fn dropping_the_guard_kills_the_whole_process_group() {
        let mut command = Command::new("sh");
        command
            .args(["-c", "sleep 1000 & echo $!; wait"])
            .stdout(Stdio::piped());
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let mut group = ProcessGroup {
            child: command.spawn().unwrap(),
        };
        let mut line = String::new();
        let mut stdout = std::io::BufReader::new(group.child.stdout.take().unwrap());
        std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
        let grandchild: u32 = line.trim().parse().unwrap();
        let shell = group.child.id();
        assert!(alive(grandchild) && alive(shell));
        drop(group);
        let deadline = Instant::now() + Duration::from_secs(5);
        while alive(grandchild) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!alive(grandchild), "the group's background process survived");
        assert!(!alive(shell));
    }

    #[test]
    fn the_cgroup2_mount_line_is_found_in_the_output() {
        let run = VmRun {
            exit_code: 0,
            output: "cgroup2 mount: cgroup2 /sys/fs/cgroup cgroup2 rw 0 0 (kernel 6.1)\nok\n".into(),
            runner_log: String::new(),
            elapsed: Duration::ZERO,
        };
        assert_eq!(
            run.cgroup2_mount(),
            Some("cgroup2 mount: cgroup2 /sys/fs/cgroup cgroup2 rw 0 0 (kernel 6.1)")
        );
    }
}
