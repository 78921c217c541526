//! A simulated container's processes: python3 workers that burn CPU (duty-cycled) and hold
//! touched memory, or a real host program under a python3 supervisor (see
//! [`super::host_binary`]).
//!
//! python3 is on every machine this project runs on, and a child that waits for one line on
//! stdin before working lets the node write its pid into the container's cgroups first: no
//! `pre_exec`, no unsafe code. A worker exits by itself when its parent (the test process) goes
//! away, so even a killed test run leaves no burners behind; normally [`ContainerProcesses`]
//! kills and reaps them on stop or drop.

use std::io::Write;
use std::process::{Child, ChildStdin, Command, Stdio};

use thiserror::Error;

use super::fakefs::ContainerUsage;
use super::host_binary::{HostCommand, SUPERVISOR};
use super::workload::Workload;

/// The worker: argv = load (fraction of one core), bytes to hold. It ignores SIGINT: a
/// terminal's Ctrl-C reaches the whole process group, and the node stops its workers itself.
const WORKER: &str = r#"
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
parent = os.getppid()
if sys.stdin.readline() == "":
    sys.exit(0)
load = min(max(float(sys.argv[1]), 0.0), 1.0)
size = int(sys.argv[2])
hold = None
if size > 0:
    try:
        hold = bytearray(size)
        for i in range(0, size, 4096):
            hold[i] = 1
    except MemoryError:
        sys.stderr.write("koord-sim worker: cannot allocate %d bytes\n" % size)
period = 0.1
while os.getppid() == parent:
    start = time.monotonic()
    while time.monotonic() - start < period * load:
        pass
    rest = period - (time.monotonic() - start)
    if rest > 0:
        time.sleep(rest)
"#;

/// Most worker processes one container may start (a load of 64 cores).
pub const MAX_WORKERS: u64 = 64;

/// The interpreter used for workers.
pub const PYTHON: &str = "python3";

/// The interpreter's real path, resolved once: launchers such as pyenv shims would otherwise
/// run a shell script (and its children) before every worker starts.
fn python() -> &'static std::ffi::OsStr {
    static RESOLVED: std::sync::OnceLock<std::ffi::OsString> = std::sync::OnceLock::new();
    RESOLVED.get_or_init(|| {
        Command::new(PYTHON)
            .args(["-c", "import sys; sys.stdout.write(sys.executable)"])
            .stdin(Stdio::null())
            .output()
            .ok()
            .filter(|out| out.status.success() && !out.stdout.is_empty())
            .map(|out| std::ffi::OsString::from(String::from_utf8_lossy(&out.stdout).into_owned()))
            .unwrap_or_else(|| PYTHON.into())
    })
}

/// Process failures.
#[derive(Debug, Error)]
pub enum ProcessError {
    /// python3 could not be started.
    #[error("cannot start {PYTHON} worker: {0}")]
    Spawn(std::io::Error),
    /// A worker did not accept its start line (it died early).
    #[error("cannot start worker {pid}: {source}")]
    Release {
        /// The worker.
        pid: u32,
        /// The write error.
        source: std::io::Error,
    },
}

/// The processes of one container; killed and reaped on [`ContainerProcesses::stop`] or drop.
#[derive(Debug)]
pub struct ContainerProcesses {
    workers: Vec<(Child, Option<ChildStdin>)>,
    /// For a host program: the supervisor's stdin, kept open while the container runs (closing
    /// it makes the supervisor kill the program's whole process group).
    lifeline: Option<ChildStdin>,
    /// True for a host program under its supervisor.
    supervised: bool,
}

/// How long a host program's supervisor gets to kill its process group once its lifeline is
/// closed, before it is killed itself.
const SUPERVISOR_PATIENCE: std::time::Duration = std::time::Duration::from_secs(2);

impl ContainerProcesses {
    /// Starts the workers for `workload`, waiting: move [`Self::pids`] into cgroups, then
    /// [`Self::release`].
    pub fn spawn(workload: Workload) -> Result<Self, ProcessError> {
        let workers = workload.cpu_milli.div_ceil(1000).clamp(1, MAX_WORKERS);
        let load_each = workload.cpu_milli.min(MAX_WORKERS * 1000) as f64 / 1000.0 / workers as f64;
        let mut processes = ContainerProcesses {
            workers: Vec::new(),
            lifeline: None,
            supervised: false,
        };
        for index in 0..workers {
            let bytes = if index == 0 { workload.memory_bytes } else { 0 };
            let mut child = Command::new(python())
                .arg("-c")
                .arg(WORKER)
                .arg(format!("{load_each:.4}"))
                .arg(bytes.to_string())
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .map_err(ProcessError::Spawn)?;
            let stdin = child.stdin.take();
            processes.workers.push((child, stdin));
        }
        Ok(processes)
    }

    /// Starts a host program under its supervisor (see [`super::host_binary`]), waiting like
    /// [`Self::spawn`]: move [`Self::pids`] into cgroups, then [`Self::release`].
    pub fn spawn_host(command: &HostCommand) -> Result<Self, ProcessError> {
        use std::os::unix::process::CommandExt;
        let mut child = Command::new(python())
            .arg("-c")
            .arg(SUPERVISOR)
            .arg(&command.program)
            .args(&command.args)
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(ProcessError::Spawn)?;
        let stdin = child.stdin.take();
        Ok(ContainerProcesses {
            workers: vec![(child, stdin)],
            lifeline: None,
            supervised: true,
        })
    }

    /// True when this container runs a host program rather than simulation workers.
    pub fn is_host_program(&self) -> bool {
        self.supervised
    }

    /// Every worker's pid.
    pub fn pids(&self) -> Vec<u32> {
        self.workers.iter().map(|(child, _)| child.id()).collect()
    }

    /// Lets the workers start working.
    pub fn release(&mut self) -> Result<(), ProcessError> {
        let host = self.supervised;
        for (child, stdin) in &mut self.workers {
            if let Some(mut pipe) = stdin.take() {
                pipe.write_all(b"go\n").map_err(|source| ProcessError::Release {
                    pid: child.id(),
                    source,
                })?;
                pipe.flush().map_err(|source| ProcessError::Release {
                    pid: child.id(),
                    source,
                })?;
                if host {
                    self.lifeline = Some(pipe);
                }
            }
        }
        Ok(())
    }

    /// True while every worker runs.
    pub fn running(&mut self) -> bool {
        self.workers
            .iter_mut()
            .all(|(child, _)| matches!(child.try_wait(), Ok(None)))
    }

    /// CPU time and resident memory of the workers (for a host program: of its whole process
    /// group), read from `/proc`.
    pub fn usage(&self) -> ContainerUsage {
        let mut total = ContainerUsage::default();
        let pids = if self.supervised {
            self.pids().into_iter().flat_map(group_members).collect()
        } else {
            self.pids()
        };
        for pid in pids {
            if let Some(usage) = proc_usage(pid) {
                total.cpu_ns += usage.cpu_ns;
                total.rss_bytes += usage.rss_bytes;
            }
        }
        total
    }

    /// Kills and reaps every worker. A host program's supervisor first gets its lifeline closed,
    /// so that it kills the program's process group.
    pub fn stop(&mut self) {
        if self.lifeline.take().is_some() {
            let deadline = std::time::Instant::now() + SUPERVISOR_PATIENCE;
            for (child, _) in &mut self.workers {
                while matches!(child.try_wait(), Ok(None)) && std::time::Instant::now() < deadline {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
            }
        }
        for (mut child, _) in self.workers.drain(..) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for ContainerProcesses {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The pids of the process group `pgid` (a host program's supervisor leads its own group).
fn group_members(pgid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return vec![pgid];
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    let after = stat.rsplit_once(')')?.1.to_owned();
                    after.split_whitespace().nth(2)?.parse::<u32>().ok()
                })
                == Some(pgid)
        })
        .collect()
}

/// One process's CPU time (utime + stime, USER_HZ = 100) and resident memory (4 KiB pages).
pub fn proc_usage(pid: u32) -> Option<ContainerUsage> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which may contain spaces: state is field 3, utime 14.
    let after = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(ContainerUsage {
        cpu_ns: ticks * 10_000_000,
        rss_bytes: pages * 4096,
    })
}
