//! koordlet's NRI plugin against a real containerd 1.7 (Debian trixie, from
//! `scripts/install-containerd.sh`), started with NRI enabled and its own root, state and
//! sockets under a temp dir. The plugin must register, be configured and synchronised by the
//! real runtime, and come back after containerd restarts; its adjustments (BE limits, cpusets,
//! the resctrl class) must reach the containers containerd starts.
//!
//! Skipped (one `skipped:` line) when not root or when containerd is not in the cache.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

#[path = "nri/containerd.rs"]
mod containerd;
#[path = "nri/cri.rs"]
mod cri;

use containerd::{CgroupParent, Containerd, containerd_root, skip_reason};

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use std::sync::atomic::{AtomicUsize, Ordering};

use koordlet::nri::api;
use koordlet::nri::{
    ConnectionState, HookSettings, NriHandler, NriTelemetry, PluginConfig, RdtAvailability, RuntimeHooks,
    run_plugin,
};
use koordlet_core::strategies::resctrl::ResctrlClasses;
use tokio::sync::watch;

/// The real hooks, counting the runtime's synchronisations.
#[derive(Default)]
struct CountingHooks {
    hooks: RuntimeHooks,
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

/// The values of be_limits for 500m request / 1500m limit / 96Mi limit in the container's real
/// cgroup; the CRI request carried no resources, so only the NRI adjustment can have set them.
fn assert_limits(parent: &CgroupParent, id: &str) {
    let dirs = parent.dirs();
    assert_eq!(read_value(&dirs, "cpu", id, "cpu.shares"), 512);
    assert_eq!(read_value(&dirs, "cpu", id, "cpu.cfs_quota_us"), 150_000);
    assert_eq!(read_value(&dirs, "cpu", id, "cpu.cfs_period_us"), 100_000);
    assert_eq!(read_value(&dirs, "memory", id, "memory.limit_in_bytes"), 96 << 20);
}

/// The plugin registered with a real containerd; stopped when dropped.
struct Registered {
    stop: watch::Sender<bool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

async fn register(containerd: &Containerd, hooks: RuntimeHooks) -> Registered {
    let mut config = PluginConfig::new(containerd.nri_socket());
    config.initial_backoff = Duration::from_millis(100);
    let (state_tx, mut state) = watch::channel(ConnectionState::Disabled);
    let (stop, stop_rx) = watch::channel(false);
    let task = tokio::spawn(run_plugin(
        config,
        Arc::new(hooks),
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
    Registered {
        stop,
        task: Some(task),
    }
}

/// A containerd with NRI and the test image, or why not (printed as `skipped:`).
async fn containerd_with_image() -> Result<Containerd, String> {
    if let Some(reason) = skip_reason() {
        return Err(reason);
    }
    if !Path::new("/sys/fs/cgroup/cpu/cpu.shares").exists() {
        return Err("no cgroup v1 cpu hierarchy at /sys/fs/cgroup/cpu".into());
    }
    let containerd = Containerd::start(&containerd_root()?);
    wait_for_socket(&containerd.path("containerd.sock")).await;
    wait_for_socket(&containerd.nri_socket()).await;
    import_image(&containerd).map_err(|e| format!("test image: {e}"))?;
    Ok(containerd)
}

/// A pod sandbox config as the kubelet sends it (host network, no hostname of its own).
fn sandbox_config(
    containerd: &Containerd,
    name: &str,
    uid: &str,
    cgroup_parent: String,
    labels: &[(&str, &str)],
    annotations: &[(&str, &str)],
) -> cri::PodSandboxConfig {
    let map = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect()
    };
    cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: name.into(),
            uid: uid.into(),
            namespace: "default".into(),
            attempt: 0,
        }),
        hostname: String::new(),
        log_directory: containerd.path("logs").to_string_lossy().into(),
        labels: map(labels),
        annotations: map(annotations),
        linux: Some(cri::LinuxPodSandboxConfig {
            cgroup_parent,
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(cri::NamespaceOption { network: 2 }),
            }),
        }),
    }
}

/// Runs the sandbox and starts container `main` of the test image in it, through the CRI:
/// (sandbox ID, container ID).
async fn start_pod(containerd: &Containerd, sandbox: cri::PodSandboxConfig) -> (String, String) {
    let cri_socket = containerd.path("containerd.sock");
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
    (run.pod_sandbox_id, created.container_id)
}

async fn remove_pod(containerd: &Containerd, sandbox_id: &str) {
    for method in ["StopPodSandbox", "RemovePodSandbox"] {
        let _: Result<cri::Empty, _> = cri::call(
            &containerd.path("containerd.sock"),
            method,
            &cri::IdRequest {
                id: sandbox_id.to_string(),
            },
        )
        .await;
    }
}

/// A BE pod through the real CRI path: the container's cgroup has the hook's values when the
/// container starts (set by containerd from the NRI adjustment, not written afterwards).
#[tokio::test]
async fn be_container_starts_with_its_batch_limits() {
    let containerd = match containerd_with_image().await {
        Ok(c) => c,
        Err(reason) => {
            println!("skipped: {reason}");
            return;
        }
    };
    let parent = CgroupParent::new();
    let plugin = register(&containerd, RuntimeHooks::default()).await;
    let spec = r#"{"containers":{"main":{"requests":{"kubernetes.io/batch-cpu":"500","kubernetes.io/batch-memory":"64Mi"},"limits":{"kubernetes.io/batch-cpu":"1500","kubernetes.io/batch-memory":"96Mi"}}}}"#;
    let sandbox = sandbox_config(
        &containerd,
        "be-pod",
        &format!("uid-{}", parent.name),
        format!("/{}", parent.name),
        &[("koordinator.sh/qosClass", "BE")],
        &[("node.koordinator.sh/extended-resource-spec", spec)],
    );
    let (sandbox_id, container_id) = start_pod(&containerd, sandbox).await;
    // containerd creates the runc container (its cgroup, with the OCI spec's limits that the
    // adjustment changed) before the process runs, so the container never ran unshaped; and
    // running, it still has them.
    assert_limits(&parent, &container_id);
    remove_pod(&containerd, &sandbox_id).await;
    drop(plugin);
}

/// An LSR pod the scheduler bound to one CPU (`scheduling.koordinator.sh/resource-status`),
/// through the real CRI path with the kubelet's cgroupfs layout: its container starts on that
/// CPU, set by containerd from the NRI adjustment; the pod cgroup (found from the runtime's
/// cgroup parent by the agent's own lookup) keeps every CPU.
#[tokio::test]
async fn lsr_container_starts_on_the_cpus_the_scheduler_bound() {
    let containerd = match containerd_with_image().await {
        Ok(c) => c,
        Err(reason) => {
            println!("skipped: {reason}");
            return;
        }
    };
    let online = std::fs::read_to_string("/sys/fs/cgroup/cpuset/cpuset.cpus").unwrap_or_default();
    let online = koordlet::system::CpuSet::parse(online.trim()).unwrap();
    let Some(last) = online.iter().last() else {
        println!("skipped: no online CPU in /sys/fs/cgroup/cpuset/cpuset.cpus");
        return;
    };
    let parent = CgroupParent::new();
    let paths = koordlet::system::KubeCgroupPaths::with_parent(
        koordlet::system::CgroupDriver::Cgroupfs,
        Path::new(&parent.name),
    )
    .unwrap();
    let cgroups = koordlet::system::Cgroups::detect(&koordlet::system::SystemRoots::default()).unwrap();
    let hooks = RuntimeHooks::default().with_pod_cgroups(Arc::new(koordlet::nri::NodePodCgroups::new(
        Arc::new(cgroups),
        paths,
    )));
    let plugin = register(&containerd, hooks).await;
    let uid = format!("lsr-{}", std::process::id());
    let pod_dir = format!("{}/kubepods/burstable/pod{uid}", parent.name);
    let bound = format!(r#"{{"cpuset": "{last}"}}"#);
    let sandbox = sandbox_config(
        &containerd,
        "lsr-pod",
        &uid,
        format!("/{pod_dir}"),
        &[("koordinator.sh/qosClass", "LSR")],
        &[("scheduling.koordinator.sh/resource-status", &bound)],
    );
    let (sandbox_id, container_id) = start_pod(&containerd, sandbox).await;
    let cpuset = Path::new("/sys/fs/cgroup/cpuset").join(&pod_dir);
    let read = |dir: &Path| {
        std::fs::read_to_string(dir.join("cpuset.cpus"))
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .trim()
            .to_string()
    };
    assert_eq!(read(&cpuset.join(&container_id)), last.to_string());
    assert_eq!(
        read(&cpuset),
        online.to_string(),
        "the pod cgroup keeps every CPU"
    );
    remove_pod(&containerd, &sandbox_id).await;
    drop(plugin);
}

/// The OCI spec containerd handed runc for container `id` (the shim's bundle).
fn oci_spec(containerd: &Containerd, id: &str) -> serde_json::Value {
    let path = containerd
        .path("state")
        .join("io.containerd.runtime.v2.task/k8s.io")
        .join(id)
        .join("config.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// The resctrl class through the real CRI path: containerd turns the hook's class into the OCI
/// spec's `linux.intelRdt.closID` of the container it starts, for a class with resctrl enabled
/// only. This host has no RDT (no resctrl mount), so runc 1.1 leaves `intelRdt` unapplied and
/// the hook decides against a fake tree: the test shows the wire path and that the container
/// starts, not a task in a real group.
#[tokio::test]
async fn resctrl_class_reaches_the_containers_oci_spec() {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    if mounts
        .lines()
        .any(|l| l.split_whitespace().nth(2) == Some("resctrl"))
    {
        // runc would write the container into the host's real tree, which has no LS group.
        println!("skipped: resctrl is mounted on this host; this test needs runc to ignore intelRdt");
        return;
    }
    let containerd = match containerd_with_image().await {
        Ok(c) => c,
        Err(reason) => {
            println!("skipped: {reason}");
            return;
        }
    };
    let tree = tempfile::tempdir().unwrap();
    for group in ["LSR", "LS", "BE"] {
        std::fs::create_dir(tree.path().join(group)).unwrap();
        std::fs::write(tree.path().join(group).join("tasks"), "").unwrap();
    }
    let hooks = RuntimeHooks::new(HookSettings {
        resctrl: ResctrlClasses {
            lsr: false,
            ls: true,
            be: false,
        },
        ..HookSettings::default()
    })
    .with_rdt(RdtAvailability::Mounted(tree.path().to_path_buf()));
    let plugin = register(&containerd, hooks).await;
    let parent = CgroupParent::new();
    let mut started = Vec::new();
    for (name, qos) in [("ls-pod", "LS"), ("lsr-pod", "LSR")] {
        let sandbox = sandbox_config(
            &containerd,
            name,
            &format!("{name}-{}", parent.name),
            format!("/{}", parent.name),
            &[("koordinator.sh/qosClass", qos)],
            &[],
        );
        started.push(start_pod(&containerd, sandbox).await);
    }
    let rdt = |id: &str| oci_spec(&containerd, id)["linux"]["intelRdt"].clone();
    assert_eq!(rdt(&started[0].1), serde_json::json!({"closID": "LS"}));
    assert_eq!(
        rdt(&started[1].1),
        serde_json::Value::Null,
        "LSR's resctrl is not enabled"
    );
    for (sandbox_id, _) in &started {
        remove_pod(&containerd, sandbox_id).await;
    }
    drop(plugin);
}
