//! A containerd 1.7 with NRI enabled, everything (root, state, sockets, runc root) under one
//! temp dir, and a cgroup parent for the test's pods; both cleaned up on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The unpacked containerd root (`<root>/usr/bin/containerd`), from `KOORD_CONTAINERD_ROOT` or
/// the install script (which only prints the cached path when it is there already).
pub fn containerd_root() -> Result<PathBuf, String> {
    if let Ok(root) = std::env::var("KOORD_CONTAINERD_ROOT") {
        return Ok(PathBuf::from(root));
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/install-containerd.sh");
    let out = Command::new(&script)
        .stderr(Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", script.display()))?;
    if !out.status.success() {
        return Err("containerd 1.7 could not be installed by scripts/install-containerd.sh".into());
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// A containerd with NRI on, everything under one temp dir; killed on drop.
pub struct Containerd {
    dir: tempfile::TempDir,
    pub root: PathBuf,
    child: Option<Child>,
}

impl Containerd {
    pub fn start(root: &Path) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("koord-nri-containerd")
            .tempdir()
            .unwrap();
        let mut c = Containerd {
            dir,
            root: root.to_path_buf(),
            child: None,
        };
        c.write_config();
        c.spawn();
        c
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn nri_socket(&self) -> PathBuf {
        self.path("nri.sock")
    }

    fn write_config(&self) {
        let d = self.dir.path().display();
        let runc = self.root.join("usr/sbin/runc");
        let runc = runc.display();
        for sub in ["nri-plugins", "nri-conf", "opt", "cni-bin", "cni-conf"] {
            std::fs::create_dir_all(self.path(sub)).unwrap();
        }
        let config = format!(
            r#"version = 2
root = "{d}/root"
state = "{d}/state"
[grpc]
  address = "{d}/containerd.sock"
[ttrpc]
  address = "{d}/containerd.sock.ttrpc"
[debug]
  address = "{d}/debug.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/opt"
[plugins."io.containerd.nri.v1.nri"]
  disable = false
  disable_connections = false
  socket_path = "{d}/nri.sock"
  plugin_path = "{d}/nri-plugins"
  plugin_config_path = "{d}/nri-conf"
  plugin_registration_timeout = "5s"
  plugin_request_timeout = "2s"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "docker.io/library/koord-nri-test:pause"
  # Without CAP_SYS_RESOURCE (as in a container) runc cannot lower oom_score_adj below ours
  # (sandboxes ask for -998): clamp it instead of failing the sandbox.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{d}/cni-bin"
    conf_dir = "{d}/cni-conf"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
    SystemdCgroup = false
    BinaryName = "{runc}"
    Root = "{d}/runc"
"#
        );
        std::fs::write(self.path("config.toml"), config).unwrap();
    }

    pub fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path("containerd.log"))
            .unwrap();
        let bin = self.root.join("usr/bin");
        let path = format!(
            "{}:{}:{}",
            bin.display(),
            self.root.join("usr/sbin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let child = Command::new(bin.join("containerd"))
            .arg("--config")
            .arg(self.path("config.toml"))
            .env("PATH", path)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_file(self.nri_socket());
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.path("containerd.log")).unwrap_or_default()
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        self.stop();
        // Shims outlive containerd: kill the ones of this instance (their command line names
        // our socket), then lift the rootfs and shm mounts below our directory.
        let dir = self.dir.path().to_string_lossy().to_string();
        let me = std::process::id().to_string();
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let pid = entry.file_name().to_string_lossy().to_string();
            if pid == me || !pid.bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains(&dir) {
                let _ = Command::new("kill").args(["-9", &pid]).status();
            }
        }
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mut mounts: Vec<&str> = mountinfo
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .filter(|m| m.starts_with(&dir))
            .collect();
        mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for m in mounts {
            let _ = Command::new("umount").args(["-l", m]).status();
        }
    }
}

/// A cgroup parent for the test's pods in every v1 hierarchy; on drop its processes are killed
/// and its directories removed.
pub struct CgroupParent {
    pub name: String,
}

impl CgroupParent {
    pub fn new() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        CgroupParent {
            name: format!("koord-nri-test-{}-{nanos}", std::process::id()),
        }
    }

    pub fn dirs(&self) -> Vec<PathBuf> {
        std::fs::read_dir("/sys/fs/cgroup")
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path().join(&self.name))
            .filter(|p| p.is_dir())
            .collect()
    }
}

impl Drop for CgroupParent {
    fn drop(&mut self) {
        fn remove(dir: &Path) {
            for sub in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                if sub.path().is_dir() {
                    remove(&sub.path());
                }
            }
            for pid in std::fs::read_to_string(dir.join("cgroup.procs"))
                .unwrap_or_default()
                .lines()
            {
                let _ = Command::new("kill").args(["-9", pid]).status();
            }
            for _ in 0..50 {
                if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        for dir in self.dirs() {
            remove(&dir);
        }
    }
}

pub fn skip_reason() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("containerd needs root".into());
    }
    match containerd_root() {
        Ok(root) if root.join("usr/bin/containerd").exists() => None,
        Ok(root) => Some(format!("no containerd under {}", root.display())),
        Err(e) => Some(e),
    }
}
