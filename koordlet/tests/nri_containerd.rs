//! koordlet's NRI plugin against a real containerd 1.7 (Debian trixie, from
//! `scripts/install-containerd.sh`), started with NRI enabled and its own root, state and
//! sockets under a temp dir. The plugin must register, be configured and synchronised by the
//! real runtime, and come back after containerd restarts.
//!
//! Skipped (one `skipped:` line) when not root or when containerd is not in the cache.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

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
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{d}/cni-bin"
    conf_dir = "{d}/cni-conf"
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
        let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
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
