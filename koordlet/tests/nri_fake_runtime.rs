//! NRI plugin against an in-process fake runtime on a unix socket: registration, the event
//! subscription, synchronisation, container creation (limits, resctrl class), the reply deadline
//! and reconnection.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

#[path = "nri/fake_runtime.rs"]
mod fake_runtime;

use std::sync::Arc;
use std::time::Duration;

use fake_runtime::FakeRuntime;
use koordlet::nri::api::{self, Event};
use koordlet::nri::{
    ConnectionState, HookSettings, NriHandler, NriTelemetry, PluginConfig, RdtAvailability, RuntimeHooks,
    run_plugin,
};
use koordlet_core::strategies::resctrl::ResctrlClasses;
use tokio::sync::watch;

const SPEC: &str = r#"{"containers":{"main":{"requests":{"kubernetes.io/batch-cpu":"500"},"limits":{"kubernetes.io/batch-cpu":"1000","kubernetes.io/batch-memory":"256Mi"}}}}"#;

fn be_pod(id: &str) -> api::PodSandbox {
    api::PodSandbox {
        id: id.into(),
        name: format!("pod-{id}"),
        namespace: "default".into(),
        uid: format!("uid-{id}"),
        labels: [("koordinator.sh/qosClass".to_string(), "BE".to_string())].into(),
        annotations: [(
            "node.koordinator.sh/extended-resource-spec".to_string(),
            SPEC.to_string(),
        )]
        .into(),
        ..Default::default()
    }
}

fn container(pod: &str, id: &str) -> api::Container {
    api::Container {
        id: id.into(),
        pod_sandbox_id: pod.into(),
        name: "main".into(),
        state: 3,
        ..Default::default()
    }
}

struct Plugin {
    state: watch::Receiver<ConnectionState>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    telemetry: NriTelemetry,
}

impl Drop for Plugin {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        self.task.abort();
    }
}

fn start(socket: &std::path::Path, handler: Arc<dyn NriHandler>, deadline: Duration) -> Plugin {
    let mut config = PluginConfig::new(socket);
    config.reply_deadline = deadline;
    config.initial_backoff = Duration::from_millis(50);
    config.max_backoff = Duration::from_millis(200);
    let (state_tx, state) = watch::channel(ConnectionState::Disabled);
    let (stop, stop_rx) = watch::channel(false);
    let telemetry = NriTelemetry::unregistered();
    let task = tokio::spawn(run_plugin(config, handler, telemetry.clone(), state_tx, stop_rx));
    Plugin {
        state,
        stop,
        task,
        telemetry,
    }
}

async fn wait_state(plugin: &mut Plugin, want: ConnectionState) {
    tokio::time::timeout(Duration::from_secs(20), plugin.state.wait_for(|s| *s == want))
        .await
        .unwrap_or_else(|_| panic!("state never became {want:?}"))
        .unwrap();
}

#[tokio::test]
async fn registers_synchronizes_adjusts_and_reconnects() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nri.sock");
    let mut plugin = start(&socket, Arc::new(RuntimeHooks::default()), Duration::from_secs(1));
    // No socket yet: the plugin waits for one.
    wait_state(&mut plugin, ConnectionState::SocketMissing).await;

    let runtime = FakeRuntime::bind(&socket);
    let mut conn = runtime.accept().await;
    assert_eq!(
        (
            conn.registered.plugin_name.as_str(),
            conn.registered.plugin_idx.as_str()
        ),
        ("koordlet_nri", "00")
    );
    wait_state(&mut plugin, ConnectionState::Registered).await;
    assert_eq!(plugin.telemetry.connected.get(), 1);

    let events = conn.configure().await;
    for e in [
        Event::CreateContainer,
        Event::UpdateContainer,
        Event::RunPodSandbox,
        Event::RemovePodSandbox,
    ] {
        assert_ne!(events & e.mask(), 0, "{e:?} not subscribed");
    }

    // Synchronize in two parts (`more`), 500 containers: every one of them is updated once.
    let pods: Vec<_> = (0..500).map(|i| be_pod(&format!("p{i}"))).collect();
    let containers: Vec<_> = (0..500)
        .map(|i| container(&format!("p{i}"), &format!("c{i}")))
        .collect();
    let first = api::SynchronizeRequest {
        pods: pods[..250].to_vec(),
        containers: containers[..250].to_vec(),
        more: true,
    };
    let reply: api::SynchronizeResponse = conn.call("Synchronize", &first).await.unwrap();
    assert!(reply.more && reply.update.is_empty());
    let last = api::SynchronizeRequest {
        pods: pods[250..].to_vec(),
        containers: containers[250..].to_vec(),
        more: false,
    };
    let reply: api::SynchronizeResponse = conn.call("Synchronize", &last).await.unwrap();
    assert_eq!(reply.update.len(), 500);
    let quota = |r: &api::LinuxResources| r.cpu.as_ref().unwrap().quota.unwrap().value;
    assert_eq!(
        quota(
            reply.update[0]
                .linux
                .as_ref()
                .unwrap()
                .resources
                .as_ref()
                .unwrap()
        ),
        100_000
    );

    let create = api::ContainerRequest {
        pod: Some(be_pod("new")),
        container: Some(container("new", "c-new")),
    };
    let reply: api::CreateContainerResponse = conn.call("CreateContainer", &create).await.unwrap();
    let resources = reply.adjust.unwrap().linux.unwrap().resources.unwrap();
    assert_eq!(resources.memory.unwrap().limit.unwrap().value, 256 << 20);
    assert_eq!(resources.cpu.unwrap().shares.unwrap().value, 512);

    // An unknown method gets an error status, not silence.
    let status = conn
        .call::<api::Empty>("Frobnicate", &api::Empty {})
        .await
        .unwrap_err();
    assert_eq!(status.code, 12);

    // The runtime goes away: the plugin notices, reconnects and registers again.
    drop(conn);
    let conn = runtime.accept().await;
    assert_eq!(conn.registered.plugin_name, "koordlet_nri");
    wait_state(&mut plugin, ConnectionState::Registered).await;
    assert!(plugin.telemetry.reconnects.get() >= 1);
}

/// A container of a pod whose class has resctrl enabled is created with that class (the round's
/// group) in the adjustment; one of a class without resctrl is not; both count as `adjusted`.
#[tokio::test]
async fn create_container_names_the_resctrl_class_of_enabled_classes_only() {
    let dir = tempfile::tempdir().unwrap();
    let resctrl = dir.path().join("resctrl");
    for group in ["LSR", "LS", "BE"] {
        std::fs::create_dir_all(resctrl.join(group)).unwrap();
        std::fs::write(resctrl.join(group).join("tasks"), "").unwrap();
    }
    let slo: koord_api::NodeSLOSpec = serde_json::from_value(serde_json::json!({
        "resourceQOSStrategy": {"lsClass": {"resctrlQOS": {"enable": true}}}
    }))
    .unwrap();
    let hooks = RuntimeHooks::new(HookSettings {
        resctrl: ResctrlClasses::from_slo(&slo),
        ..HookSettings::default()
    })
    .with_rdt(RdtAvailability::Mounted(resctrl));
    let socket = dir.path().join("nri.sock");
    let runtime = FakeRuntime::bind(&socket);
    let plugin = start(&socket, Arc::new(hooks), Duration::from_secs(1));
    let mut conn = runtime.accept().await;
    conn.configure().await;

    let mut ls = be_pod("ls");
    ls.labels.insert("koordinator.sh/qosClass".into(), "LS".into());
    ls.annotations.clear();
    let create = api::ContainerRequest {
        pod: Some(ls),
        container: Some(container("ls", "c-ls")),
    };
    let reply: api::CreateContainerResponse = conn.call("CreateContainer", &create).await.unwrap();
    let resources = reply.adjust.unwrap().linux.unwrap().resources.unwrap();
    assert_eq!(
        resources.rdt_class,
        Some(api::OptionalString { value: "LS".into() })
    );
    assert!(resources.cpu.is_none() && resources.memory.is_none());

    // BE's resctrl is not enabled: the batch limits, no class.
    let create = api::ContainerRequest {
        pod: Some(be_pod("be")),
        container: Some(container("be", "c-be")),
    };
    let reply: api::CreateContainerResponse = conn.call("CreateContainer", &create).await.unwrap();
    let resources = reply.adjust.unwrap().linux.unwrap().resources.unwrap();
    assert_eq!(resources.rdt_class, None);
    assert_eq!(resources.cpu.unwrap().shares.unwrap().value, 512);

    // LSR: neither limits nor a class, so no adjustment at all.
    let mut lsr = be_pod("lsr");
    lsr.labels.insert("koordinator.sh/qosClass".into(), "LSR".into());
    let create = api::ContainerRequest {
        pod: Some(lsr),
        container: Some(container("lsr", "c-lsr")),
    };
    let reply: api::CreateContainerResponse = conn.call("CreateContainer", &create).await.unwrap();
    assert_eq!(reply.adjust, None);

    let mut text = String::new();
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register("nri_requests", "", plugin.telemetry.requests.clone());
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    for (result, n) in [("adjusted", 2), ("unchanged", 1)] {
        assert!(
            text.contains(&format!(
                r#"nri_requests_total{{event="create_container",result="{result}"}} {n}"#
            )),
            "{text}"
        );
    }
}

/// A handler that takes far longer than any deadline.
struct Slow;

impl NriHandler for Slow {
    fn synchronize(&self, _: &[api::PodSandbox], _: &[api::Container]) -> Vec<api::ContainerUpdate> {
        std::thread::sleep(Duration::from_secs(3));
        Vec::new()
    }
    fn create_container(&self, _: &api::PodSandbox, _: &api::Container) -> Option<api::ContainerAdjustment> {
        std::thread::sleep(Duration::from_secs(3));
        Some(api::ContainerAdjustment::default())
    }
    fn update_container(
        &self,
        _: &api::PodSandbox,
        _: &api::Container,
        _: Option<&api::LinuxResources>,
    ) -> Vec<api::ContainerUpdate> {
        Vec::new()
    }
}

#[tokio::test]
async fn a_hook_past_its_deadline_lets_the_container_start_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nri.sock");
    let runtime = FakeRuntime::bind(&socket);
    let _plugin = start(&socket, Arc::new(Slow), Duration::from_millis(100));
    let mut conn = runtime.accept().await;
    conn.configure().await;
    let create = api::ContainerRequest {
        pod: Some(be_pod("p")),
        container: Some(container("p", "c")),
    };
    let reply: api::CreateContainerResponse = conn.call("CreateContainer", &create).await.unwrap();
    assert_eq!(reply.adjust, None, "past the deadline the answer is 'no change'");
    let mut text = String::new();
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register("nri_requests", "", _plugin.telemetry.requests.clone());
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(
        text.contains(r#"nri_requests_total{event="create_container",result="timeout"} 1"#),
        "{text}"
    );
}

/// Prints the time and message sizes of a 500-container Synchronize round trip over the
/// socket (`cargo test -p koordlet --test nri_fake_runtime -- --ignored --nocapture`).
#[tokio::test]
#[ignore = "benchmark: prints figures"]
async fn synchronize_500_containers_bench() {
    use prost::Message as _;
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nri.sock");
    let runtime = FakeRuntime::bind(&socket);
    let _plugin = start(&socket, Arc::new(RuntimeHooks::default()), Duration::from_secs(1));
    let mut conn = runtime.accept().await;
    conn.configure().await;
    let request = api::SynchronizeRequest {
        pods: (0..500).map(|i| be_pod(&format!("p{i}"))).collect(),
        containers: (0..500)
            .map(|i| container(&format!("p{i}"), &format!("c{i}")))
            .collect(),
        more: false,
    };
    let mut times = Vec::new();
    let mut reply_len = 0;
    for _ in 0..20 {
        let started = std::time::Instant::now();
        let reply: api::SynchronizeResponse = conn.call("Synchronize", &request).await.unwrap();
        times.push(started.elapsed());
        reply_len = reply.encoded_len();
        assert_eq!(reply.update.len(), 500);
    }
    times.sort();
    println!(
        "synchronize 500 containers: request {} KiB, reply {} KiB, round trip median {:?}, max {:?}",
        request.encoded_len() / 1024,
        reply_len / 1024,
        times[times.len() / 2],
        times[times.len() - 1]
    );
}
