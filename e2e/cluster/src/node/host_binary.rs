//! Containers that run a real third-party program of the host instead of the python simulation.
//!
//! When a container's `command` names one of [`HOST_BINARIES`] (`nginx`, `memcached`,
//! `stress-ng`, by bare name or path) and that program is installed on the host, the simulated
//! node runs it with the container's command and args, inside the container's real cgroups, so
//! that benchmarks measure real services next to real batch work. The pod annotation
//! [`ANNOTATION_HOST_BINARY`] `"false"` keeps the simulation for such a pod.
//!
//! # Lifetime
//!
//! The program runs under a small python3 supervisor started in a process group of its own.
//! The supervisor waits for the node's start line (so its pid is in the cgroups before the
//! program exists; the program and everything it forks inherit them), starts the program, then
//! watches its stdin: the node keeps the write end open while the container runs. When the node
//! stops the container, or the test process dies for any reason (even SIGKILL, since the kernel
//! closes the pipe then), the supervisor kills its whole process group, so neither nginx
//! workers nor stress-ng stressors outlive a run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Container;

/// Programs a container may run for real when the host has them.
pub const HOST_BINARIES: [&str; 3] = ["nginx", "memcached", "stress-ng"];

/// Pod annotation: `"false"` keeps the python simulation even when the command names a host
/// binary.
pub const ANNOTATION_HOST_BINARY: &str = "sim.koordinator.sh/host-binary";

/// Directories searched besides `PATH` (nginx lives in `/usr/sbin`, which a user's `PATH` may
/// lack).
const EXTRA_DIRS: [&str; 4] = ["/usr/sbin", "/usr/bin", "/sbin", "/bin"];

/// A container's real program and its argv (without the program).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostCommand {
    /// The resolved executable.
    pub program: PathBuf,
    /// Arguments: the rest of `command`, then `args`.
    pub args: Vec<String>,
}

/// The supervisor: argv = program and its arguments. See the module docs.
pub(crate) const SUPERVISOR: &str = r#"
import os, signal, subprocess, sys, threading
signal.signal(signal.SIGINT, signal.SIG_IGN)
if sys.stdin.readline() == "":
    sys.exit(0)
def lifeline():
    sys.stdin.read()
    os.killpg(0, signal.SIGKILL)
threading.Thread(target=lifeline, daemon=True).start()
try:
    child = subprocess.Popen(sys.argv[1:], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
except OSError as e:
    sys.stderr.write("koord-sim: cannot start %s: %s\n" % (sys.argv[1], e))
    sys.exit(127)
sys.exit(child.wait())
"#;

/// The host program this container runs, if its command names one the host has and the pod
/// does not opt out.
pub fn host_command(annotations: &BTreeMap<String, String>, container: &Container) -> Option<HostCommand> {
    if annotations.get(ANNOTATION_HOST_BINARY).map(String::as_str) == Some("false") {
        return None;
    }
    let command = container.command.as_ref()?;
    let (first, rest) = command.split_first()?;
    let name = Path::new(first).file_name()?.to_str()?;
    if !HOST_BINARIES.contains(&name) {
        return None;
    }
    let program = resolve(first)?;
    let args = rest
        .iter()
        .chain(container.args.iter().flatten())
        .cloned()
        .collect();
    Some(HostCommand { program, args })
}

/// Whether `name` is an installed program (for callers that want to say why they skip).
pub fn installed(name: &str) -> Option<PathBuf> {
    resolve(name)
}

fn resolve(program: &str) -> Option<PathBuf> {
    let path = Path::new(program);
    if path.is_absolute() {
        return executable(path).then(|| path.to_path_buf());
    }
    let from_env = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&from_env)
        .chain(EXTRA_DIRS.iter().map(PathBuf::from))
        .map(|dir| dir.join(program))
        .find(|candidate| executable(candidate))
}

fn executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(command: &[&str], args: &[&str]) -> Container {
        let strings = |v: &[&str]| (!v.is_empty()).then(|| v.iter().map(|s| s.to_string()).collect());
        Container {
            name: "c".into(),
            command: strings(command),
            args: strings(args),
            ..Default::default()
        }
    }

    #[test]
    fn only_named_and_installed_programs_run_for_real() {
        let none = BTreeMap::new();
        assert_eq!(host_command(&none, &container(&["stress"], &["-c", "1"])), None);
        assert_eq!(host_command(&none, &container(&["sh", "-c", "nginx"], &[])), None);
        assert_eq!(host_command(&none, &container(&[], &["nginx"])), None);
        assert_eq!(
            host_command(&none, &container(&["/nonexistent/dir/nginx"], &[])),
            None
        );
        let Some(path) = installed("stress-ng") else {
            println!("skipped: stress-ng is not installed (scripts/install-bench-workloads.sh)");
            return;
        };
        let c = container(&["stress-ng", "--cpu", "1"], &["--timeout", "1"]);
        assert_eq!(
            host_command(&none, &c),
            Some(HostCommand {
                program: path,
                args: vec!["--cpu".into(), "1".into(), "--timeout".into(), "1".into()],
            })
        );
        let opt_out = BTreeMap::from([(ANNOTATION_HOST_BINARY.to_string(), "false".to_string())]);
        assert_eq!(host_command(&opt_out, &c), None);
    }

    #[test]
    fn a_host_program_and_its_children_die_with_the_container() {
        use crate::node::process::ContainerProcesses;
        let Some(program) = installed("stress-ng") else {
            println!("skipped: stress-ng is not installed (scripts/install-bench-workloads.sh)");
            return;
        };
        let command = HostCommand {
            program,
            args: ["--cpu", "2", "--cpu-load", "5", "--timeout", "60", "-q"]
                .map(String::from)
                .to_vec(),
        };
        let mut processes = ContainerProcesses::spawn_host(&command).unwrap();
        let leader = processes.pids()[0];
        processes.release().unwrap();
        assert!(processes.is_host_program());
        let members = || {
            std::fs::read_dir("/proc")
                .unwrap()
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .filter(|pid| {
                    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                        s.rsplit_once(')')
                            .and_then(|(_, rest)| rest.split_whitespace().nth(2)?.parse::<u32>().ok())
                            == Some(leader)
                    })
                })
                .count()
        };
        // Supervisor, stress-ng and its two stressors.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while members() < 4 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(members() >= 4, "stress-ng did not start its stressors");
        assert!(processes.running());
        processes.stop();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while members() > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert_eq!(members(), 0, "processes of the group outlived the container");
    }
}
