//! koordlet's NRI plugin against a real containerd 1.7 (Debian trixie, from
//! `scripts/install-containerd.sh`), started with NRI enabled and its own root, state and
//! sockets under a temp dir. The plugin must register, be configured and synchronised by the
//! real runtime, and come back after containerd restarts.
//!
//! Skipped (one `skipped:` line) when not root or when containerd is not in the cache.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

#[path = "nri/cri.rs"]
mod cri;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use std::sync::atomic::{AtomicUsize, Ordering};

use koordlet::nri::api;
use koordlet::nri::{BeHooks, ConnectionState, NriHandler, NriTelemetry, PluginConfig, run_plugin};
use tokio::sync::watch;

/// The unpacked containerd root (`<root>/usr/bin/containerd`), from `KOORD_CONTAINERD_ROOT` or
/// the install script (which only prints the cached path when it is there already).
fn containerd_root() -> Result<PathBuf, String> {
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
struct Containerd {
    dir: tempfile::TempDir,
    root: PathBuf,
    child: Option<Child>,
}

impl Containerd {
    fn start(root: &Path) -> Self {
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

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn nri_socket(&self) -> PathBuf {
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

    fn spawn(&mut self) {
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

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_file(self.nri_socket());
    }

    fn log(&self) -> String {
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
struct CgroupParent {
    name: String,
}

impl CgroupParent {
    fn new() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        CgroupParent {
            name: format!("koord-nri-test-{}-{nanos}", std::process::id()),
        }
    }

    fn dirs(&self) -> Vec<PathBuf> {
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

fn skip_reason() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("containerd needs root".into());
    }
    match containerd_root() {
        Ok(root) if root.join("usr/bin/containerd").exists() => None,
        Ok(root) => Some(format!("no containerd under {}", root.display())),
        Err(e) => Some(e),
    }
}

/// The real hooks, counting the runtime's synchronisations.
#[derive(Default)]
struct CountingHooks {
    hooks: BeHooks,
    syncs: AtomicUsize,
}

impl NriHandler for CountingHooks {
    fn synchronize(
        &self,
        pods: &[api::PodSandbox],
        containers: &[api::Container],
    ) -> Vec<api::ContainerUpdate> {
        self.syncs.fetch_add(1, Ordering::SeqCst);
        self.hooks.synchronize(pods, containers)
    }
    fn create_container(
        &self,
        pod: &api::PodSandbox,
        container: &api::Container,
    ) -> Option<api::ContainerAdjustment> {
        self.hooks.create_container(pod, container)
    }
    fn update_container(
        &self,
        pod: &api::PodSandbox,
        container: &api::Container,
        requested: Option<&api::LinuxResources>,
    ) -> Vec<api::ContainerUpdate> {
        self.hooks.update_container(pod, container, requested)
    }
}

async fn wait_for_syncs(hooks: &CountingHooks, n: usize, containerd: &Containerd) {
    for _ in 0..300 {
        if hooks.syncs.load(Ordering::SeqCst) >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "containerd did not synchronise the plugin {n} time(s); its log:\n{}",
        containerd.log()
    );
}

#[tokio::test]
async fn registers_with_real_containerd_and_survives_its_restart() {
    if let Some(reason) = skip_reason() {
        println!("skipped: {reason}");
        return;
    }
    let mut containerd = Containerd::start(&containerd_root().unwrap());
    let mut config = PluginConfig::new(containerd.nri_socket());
    config.initial_backoff = Duration::from_millis(100);
    config.max_backoff = Duration::from_millis(500);
    let (state_tx, mut state) = watch::channel(ConnectionState::Disabled);
    let (stop_tx, stop_rx) = watch::channel(false);
    let telemetry = NriTelemetry::unregistered();
    let hooks = Arc::new(CountingHooks::default());
    let plugin = tokio::spawn(run_plugin(
        config,
        hooks.clone(),
        telemetry.clone(),
        state_tx,
        stop_rx,
    ));
    let registered = |state: &mut watch::Receiver<ConnectionState>| {
        let mut state = state.clone();
        async move {
            tokio::time::timeout(
                Duration::from_secs(30),
                state.wait_for(|s| *s == ConnectionState::Registered),
            )
            .await
            .expect("not registered with containerd")
            .unwrap();
        }
    };
    registered(&mut state).await;
    // containerd configured and synchronised the plugin.
    wait_for_syncs(&hooks, 1, &containerd).await;
    assert_eq!(telemetry.connected.get(), 1);

    // containerd restarts: the plugin sees the loss and registers with the new instance.
    containerd.stop();
    tokio::time::timeout(
        Duration::from_secs(30),
        state.wait_for(|s| *s != ConnectionState::Registered),
    )
    .await
    .expect("loss of containerd not noticed")
    .unwrap();
    containerd.spawn();
    registered(&mut state).await;
    wait_for_syncs(&hooks, 2, &containerd).await;
    assert!(telemetry.reconnects.get() >= 1);

    let _ = stop_tx.send(true);
    tokio::time::timeout(Duration::from_secs(10), plugin)
        .await
        .unwrap()
        .unwrap();
}

const IMAGE: &str = "docker.io/library/koord-nri-test:pause";

/// Builds the test image (scripts/images/busy.c, static, sleeps until SIGTERM) as an OCI
/// archive and imports it into `containerd`; it is also the sandbox image.
fn import_image(containerd: &Containerd) -> Result<(), String> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let rootfs = containerd.path("image-rootfs");
    std::fs::create_dir_all(&rootfs).unwrap();
    let run = |cmd: &mut Command| -> Result<(), String> {
        let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!("{cmd:?}: {}", String::from_utf8_lossy(&out.stderr)))
        }
    };
    run(Command::new("gcc")
        .args(["-Os", "-static", "-o"])
        .arg(rootfs.join("busy"))
        .arg(repo.join("scripts/images/busy.c")))?;
    let archive = containerd.path("image.tar");
    run(Command::new("python3")
        .arg(repo.join("scripts/oci-archive.py"))
        .arg(&rootfs)
        .arg(IMAGE)
        .arg(&archive)
        .args(["--entrypoint", "/busy", "--user", "0"]))?;
    run(Command::new(containerd.root.join("usr/bin/ctr"))
        .arg("--address")
        .arg(containerd.path("containerd.sock"))
        .args(["-n", "k8s.io", "images", "import"])
        .arg(&archive))
}

async fn wait_for_socket(path: &Path) {
    for _ in 0..200 {
        if path.exists() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{} never appeared", path.display());
}

fn read_value(dirs: &[PathBuf], controller: &str, container: &str, file: &str) -> i64 {
    let dir = dirs
        .iter()
        .find(|d| {
            d.parent()
                .and_then(|p| p.file_name())
                .is_some_and(|n| n == controller)
        })
        .unwrap_or_else(|| panic!("no {controller} hierarchy"));
    let path = dir.join(container).join(file);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .parse()
        .unwrap()
}

/// A BE pod through the real CRI path: the container's cgroup has the hook's values when the
/// container starts (set by containerd from the NRI adjustment, not written afterwards).
#[tokio::test]
async fn be_container_starts_with_its_batch_limits() {
    if let Some(reason) = skip_reason() {
        println!("skipped: {reason}");
        return;
    }
    if !Path::new("/sys/fs/cgroup/cpu/cpu.shares").exists() {
        println!("skipped: no cgroup v1 cpu hierarchy at /sys/fs/cgroup/cpu");
        return;
    }
    let parent = CgroupParent::new();
    let containerd = Containerd::start(&containerd_root().unwrap());
    let cri_socket = containerd.path("containerd.sock");
    wait_for_socket(&cri_socket).await;
    wait_for_socket(&containerd.nri_socket()).await;
    if let Err(e) = import_image(&containerd) {
        println!("skipped: test image: {e}");
        return;
    }
    let mut config = PluginConfig::new(containerd.nri_socket());
    config.initial_backoff = Duration::from_millis(100);
    let (state_tx, mut state) = watch::channel(ConnectionState::Disabled);
    let (stop_tx, stop_rx) = watch::channel(false);
    let plugin = tokio::spawn(run_plugin(
        config,
        Arc::new(BeHooks::default()),
        NriTelemetry::unregistered(),
        state_tx,
        stop_rx,
    ));
    tokio::time::timeout(
        Duration::from_secs(30),
        state.wait_for(|s| *s == ConnectionState::Registered),
    )
    .await
    .expect("not registered")
    .unwrap();

    let spec = r#"{"containers":{"main":{"requests":{"kubernetes.io/batch-cpu":"500","kubernetes.io/batch-memory":"64Mi"},"limits":{"kubernetes.io/batch-cpu":"1500","kubernetes.io/batch-memory":"96Mi"}}}}"#;
    let sandbox = cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: "be-pod".into(),
            uid: format!("uid-{}", parent.name),
            namespace: "default".into(),
            attempt: 0,
        }),
        // Host network: no hostname of its own (as the kubelet does it).
        hostname: String::new(),
        log_directory: containerd.path("logs").to_string_lossy().into(),
        labels: [("koordinator.sh/qosClass".to_string(), "BE".to_string())].into(),
        annotations: [(
            "node.koordinator.sh/extended-resource-spec".to_string(),
            spec.to_string(),
        )]
        .into(),
        linux: Some(cri::LinuxPodSandboxConfig {
            cgroup_parent: format!("/{}", parent.name),
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(cri::NamespaceOption { network: 2 }),
            }),
        }),
    };
    let run: cri::RunPodSandboxResponse = cri::call(
        &cri_socket,
        "RunPodSandbox",
        &cri::RunPodSandboxRequest {
            config: Some(sandbox.clone()),
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\ncontainerd log:\n{}", containerd.log()));
    let created: cri::CreateContainerResponse = cri::call(
        &cri_socket,
        "CreateContainer",
        &cri::CreateContainerRequest {
            pod_sandbox_id: run.pod_sandbox_id.clone(),
            config: Some(cri::ContainerConfig {
                metadata: Some(cri::ContainerMetadata { name: "main".into() }),
                image: Some(cri::ImageSpec { image: IMAGE.into() }),
                log_path: "main.log".into(),
            }),
            sandbox_config: Some(sandbox),
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\ncontainerd log:\n{}", containerd.log()));
    let _: cri::Empty = cri::call(
        &cri_socket,
        "StartContainer",
        &cri::IdRequest {
            id: created.container_id.clone(),
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\ncontainerd log:\n{}", containerd.log()));

    // The values of be_limits for 500m request / 1500m limit / 96Mi limit, in the real cgroup
    // runc created for the container: nothing but the NRI adjustment wrote them.
    let dirs = parent.dirs();
    let id = &created.container_id;
    assert_eq!(read_value(&dirs, "cpu", id, "cpu.shares"), 512);
    assert_eq!(read_value(&dirs, "cpu", id, "cpu.cfs_quota_us"), 150_000);
    assert_eq!(read_value(&dirs, "cpu", id, "cpu.cfs_period_us"), 100_000);
    assert_eq!(read_value(&dirs, "memory", id, "memory.limit_in_bytes"), 96 << 20);

    for method in ["StopPodSandbox", "RemovePodSandbox"] {
        let _: Result<cri::Empty, _> = cri::call(
            &cri_socket,
            method,
            &cri::IdRequest {
                id: run.pod_sandbox_id.clone(),
            },
        )
        .await;
    }
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(10), plugin).await;
}
