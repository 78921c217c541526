//! A component in a child process: spawned with its log in a file, stopped with SIGTERM (then
//! SIGKILL), and killed on drop so a failed soak leaves no process behind.

use std::path::{Path, PathBuf};

use koord_test_support::cgroup::CgroupV1Tree;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::SoakError;

/// How long a component gets between SIGTERM and SIGKILL.
const STOP_PATIENCE: Duration = Duration::from_secs(10);

pub(super) struct Component {
    name: &'static str,
    child: Mutex<Child>,
    pid: u32,
    /// Its own memory cgroup, when the soak could make one.
    memory_cgroup: Option<PathBuf>,
}

impl Component {
    pub(super) fn spawn(
        name: &'static str,
        exe: &Path,
        args: &[String],
        log_dir: &Path,
        tree: Option<&CgroupV1Tree>,
    ) -> Result<Self, SoakError> {
        let io = |what: String| move |source| SoakError::Io { what, source };
        let log = std::fs::File::create(log_dir.join(format!("{name}.log")))
            .map_err(io(format!("{name} log file")))?;
        let err = log.try_clone().map_err(io(format!("{name} log file")))?;
        // In a memory cgroup of its own from its first instruction, so its whole footprint
        // (kernel memory included) is charged there.
        let (mut command, memory_cgroup) = match tree {
            Some(tree) => {
                tree.mkdir(name).map_err(io(format!("{name} memory cgroup")))?;
                (tree.command_in(name, exe), Some(tree.path("memory", name)))
            }
            None => (Command::new(exe), None),
        };
        let child = command
            .arg(name)
            .args(args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(io(format!("start {} {name}", exe.display())))?;
        Ok(Component {
            name,
            pid: child.id(),
            child: Mutex::new(child),
            memory_cgroup,
        })
    }

    pub(super) fn memory_cgroup(&self) -> Option<&Path> {
        self.memory_cgroup.as_deref()
    }

    pub(super) fn pid(&self) -> u32 {
        self.pid
    }

    pub(super) fn name(&self) -> &'static str {
        self.name
    }

    pub(super) fn has_exited(&self) -> bool {
        let mut child = self.child.lock().unwrap_or_else(|p| p.into_inner());
        !matches!(child.try_wait(), Ok(None))
    }

    /// SIGTERM, then SIGKILL after [`STOP_PATIENCE`].
    pub(super) async fn stop(&self) {
        // Our own child, not reaped yet (we hold it): the pid is still its.
        if let Some(pid) = rustix::process::Pid::from_raw(self.pid as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let deadline = Instant::now() + STOP_PATIENCE;
        while Instant::now() < deadline && !self.has_exited() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Component {
    fn drop(&mut self) {
        let child = self.child.get_mut().unwrap_or_else(|p| p.into_inner());
        if matches!(child.try_wait(), Ok(None)) {
            let _ = child.kill();
        }
        let _ = child.wait();
    }
}
