//! Component runners: koord-manager, koord-webhook and one koordlet per simulated node, started
//! in-process (tokio tasks on the caller's runtime) against an embedded [`TestCluster`], with the
//! flags a real deployment would give them.
//!
//! ```no_run
//! # async fn demo(cluster: &koord_testcluster::TestCluster, nodes: &koord_testcluster::node::SimulatedNodes) -> Result<(), koord_e2e::components::ComponentError> {
//! use koord_e2e::components::{Components, Selection};
//! let components = Components::start(cluster, nodes.nodes(), Selection::all()).await?;
//! // ... drive the cluster ...
//! components.shutdown(cluster).await; // or drop it: every task is stopped
//! # Ok(()) }
//! ```
//!
//! Each component gets the same flags as its binary would (parsed by the component's own clap
//! definition), so a flag added to a component works here too; extra flags go in [`Selection`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use koord_testcluster::TestCluster;
use koord_testcluster::node::NodeInfo;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::webhook_config;

/// Namespace of the webhook's Secret and Service (the chart's release namespace).
pub const WEBHOOK_NAMESPACE: &str = "koordinator-system";
/// Service the webhook configurations refer to (resolved through the cluster's loopback map).
pub const WEBHOOK_SERVICE: &str = "koordinator-webhook-service";
/// How long a component gets to stop on [`Components::shutdown`] before it is aborted.
const STOP_PATIENCE: Duration = Duration::from_secs(10);
/// How long the webhook may take for its caches and certificate Secret.
const WEBHOOK_READY_TIMEOUT: Duration = Duration::from_secs(30);

/// Which components to start, and extra flags for each (appended after the runner's own, so
/// they override them).
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// Start koord-manager (NodeSLO, NodeMetric, batch resources).
    pub manager: bool,
    /// Start koord-webhook and register its webhook configurations.
    pub webhook: bool,
    /// Start one koordlet per simulated node.
    pub koordlet: bool,
    /// Extra koord-manager flags, e.g. `--resync-seconds=1`.
    pub manager_args: Vec<String>,
    /// Extra koord-webhook flags.
    pub webhook_args: Vec<String>,
    /// Extra koordlet flags (every node), e.g. `--collect-interval=500ms`.
    pub koordlet_args: Vec<String>,
}

impl Selection {
    /// Every component, with default flags.
    pub fn all() -> Self {
        Selection {
            manager: true,
            webhook: true,
            koordlet: true,
            ..Selection::default()
        }
    }

    /// No component; enable the ones wanted field by field.
    pub fn none() -> Self {
        Selection::default()
    }
}

/// Why a component could not start.
#[derive(Debug, thiserror::Error)]
pub enum ComponentError {
    /// A component rejected the flags the runner built.
    #[error("{component} flags: {message}")]
    Flags {
        /// Which component.
        component: &'static str,
        /// clap's message.
        message: String,
    },
    /// The kubeconfig for the components could not be written.
    #[error("kubeconfig: {0}")]
    Kubeconfig(String),
    /// No client for the cluster.
    #[error("cluster client: {0}")]
    Client(String),
    /// The webhook server did not start.
    #[error("webhook: {0}")]
    Webhook(String),
    /// Registering the webhook configurations failed.
    #[error("webhook configurations: {0}")]
    WebhookConfig(String),
    /// No free loopback port for a koordlet's health endpoint.
    #[error("koordlet health port: {0}")]
    Port(std::io::Error),
}

/// One running koordlet.
#[derive(Debug, Clone)]
pub struct KoordletInfo {
    /// The node it runs for.
    pub node: String,
    /// Its `/healthz`, `/readyz` and `/metrics` address.
    pub health_addr: SocketAddr,
}

/// A component task and its name, for logs at shutdown.
struct Task {
    name: String,
    handle: JoinHandle<()>,
}

/// The running components. [`Components::shutdown`] stops them gracefully; dropping stops them
/// at once (tasks aborted), also while a panic unwinds.
pub struct Components {
    stop: CancellationToken,
    tasks: Vec<Task>,
    webhook: Option<koord_webhook::serve::RunningWebhook>,
    webhook_addr: Option<SocketAddr>,
    koordlets: Vec<KoordletInfo>,
    kubeconfig: tempfile::TempDir,
}

impl Components {
    /// Starts the selected components against `cluster`; koordlets run for each of `nodes`.
    /// The webhook is ready (caches synced, configurations registered) when this returns.
    pub async fn start(
        cluster: &TestCluster,
        nodes: &[NodeInfo],
        selection: Selection,
    ) -> Result<Self, ComponentError> {
        let kubeconfig = tempfile::Builder::new()
            .prefix("koord-components-")
            .tempdir()
            .map_err(|e| ComponentError::Kubeconfig(e.to_string()))?;
        let kubeconfig_path = kubeconfig.path().join("kubeconfig");
        cluster
            .write_kubeconfig(&kubeconfig_path)
            .map_err(|e| ComponentError::Kubeconfig(e.to_string()))?;
        let mut components = Components {
            stop: CancellationToken::new(),
            tasks: Vec::new(),
            webhook: None,
            webhook_addr: None,
            koordlets: Vec::new(),
            kubeconfig,
        };
        // The webhook first, so that pods created once the others run are admitted by it.
        if selection.webhook {
            components.start_webhook(cluster, &selection.webhook_args).await?;
        }
        if selection.manager {
            components.start_manager(cluster, &kubeconfig_path, &selection.manager_args)?;
        }
        if selection.koordlet {
            for node in nodes {
                components.start_koordlet(node, &kubeconfig_path, &selection.koordlet_args)?;
            }
        }
        Ok(components)
    }

    /// The koordlets, one per node, in node order.
    pub fn koordlets(&self) -> &[KoordletInfo] {
        &self.koordlets
    }

    /// The koordlet of `node`.
    pub fn koordlet(&self, node: &str) -> Option<&KoordletInfo> {
        self.koordlets.iter().find(|k| k.node == node)
    }

    /// The webhook's HTTPS address, when it runs.
    pub fn webhook_addr(&self) -> Option<SocketAddr> {
        self.webhook_addr
    }

    /// The kubeconfig file the components were given.
    pub fn kubeconfig_path(&self) -> PathBuf {
        self.kubeconfig.path().join("kubeconfig")
    }

    fn start_manager(
        &mut self,
        cluster: &TestCluster,
        kubeconfig: &std::path::Path,
        extra: &[String],
    ) -> Result<(), ComponentError> {
        let identity = format!("koord-manager-e2e-{}", std::process::id());
        let mut argv = vec![
            "koord-manager".to_string(),
            format!("--kubeconfig={}", kubeconfig.display()),
            "--metrics-addr=127.0.0.1:0".into(),
            "--health-addr=127.0.0.1:0".into(),
        ];
        // Two managers in one process (leader election) need their own identities.
        if !extra.iter().any(|a| a.starts_with("--identity")) {
            argv.push(format!("--identity={identity}"));
        }
        argv.extend(extra.iter().cloned());
        let cli = koord_manager::cli::Cli::try_parse_from(&argv).map_err(|e| ComponentError::Flags {
            component: "koord-manager",
            message: e.to_string(),
        })?;
        let client = cluster
            .client()
            .map_err(|e| ComponentError::Client(e.to_string()))?;
        let stop = self.stop.clone();
        let handle = tokio::spawn(async move {
            let shutdown = async move { stop.cancelled().await };
            if let Err(error) = koord_manager::run::run(cli.run, client, shutdown).await {
                tracing::error!(%error, "koord-manager stopped with an error");
            }
        });
        tracing::info!("koord-manager started");
        self.tasks.push(Task {
            name: "koord-manager".into(),
            handle,
        });
        Ok(())
    }

    async fn start_webhook(&mut self, cluster: &TestCluster, extra: &[String]) -> Result<(), ComponentError> {
        let mut argv = vec![
            "koord-webhook".to_string(),
            "--port=0".into(),
            "--bind-address=127.0.0.1".into(),
            "--health-addr=127.0.0.1:0".into(),
            "--metrics-addr=127.0.0.1:0".into(),
            format!("--namespace={WEBHOOK_NAMESPACE}"),
            format!("--service-name={WEBHOOK_SERVICE}"),
            format!("--mutating-webhook-name={}", webhook_config::MUTATING_NAME),
            format!("--validating-webhook-name={}", webhook_config::VALIDATING_NAME),
        ];
        argv.extend(extra.iter().cloned());
        let cli = koord_webhook::cli::Cli::try_parse_from(&argv).map_err(|e| ComponentError::Flags {
            component: "koord-webhook",
            message: e.to_string(),
        })?;
        let client = cluster
            .client()
            .map_err(|e| ComponentError::Client(e.to_string()))?;
        webhook_config::ensure_namespace(cluster, &cli.server.namespace)
            .await
            .map_err(ComponentError::WebhookConfig)?;
        // The admission metrics registry is not served in-process (no admin endpoint: `start`
        // only runs the HTTPS server); it lives as long as this call.
        let mut registry = prometheus_client::registry::Registry::default();
        let running = koord_webhook::serve::start(&cli.server, client.clone(), &mut registry)
            .await
            .map_err(|e| ComponentError::Webhook(e.to_string()))?;
        cluster.register_service(&cli.server.namespace, &cli.server.service_name, running.addr);
        self.webhook_addr = Some(running.addr);
        let synced = tokio::time::timeout(WEBHOOK_READY_TIMEOUT, running.caches_synced()).await;
        self.webhook = Some(running);
        if synced.is_err() {
            return Err(ComponentError::Webhook(format!(
                "caches not synced within {WEBHOOK_READY_TIMEOUT:?}"
            )));
        }
        let ca_bundle = webhook_config::ca_bundle(client, &cli.server.namespace, &cli.server.secret_name)
            .await
            .map_err(ComponentError::WebhookConfig)?;
        let target = webhook_config::Target {
            namespace: cli.server.namespace.clone(),
            service: cli.server.service_name.clone(),
            ca_bundle,
        };
        for object in webhook_config::configurations(&target) {
            cluster
                .apply_object(object)
                .await
                .map_err(|e| ComponentError::WebhookConfig(e.to_string()))?;
        }
        tracing::info!(addr = ?self.webhook_addr, "koord-webhook started and registered");
        Ok(())
    }

    fn start_koordlet(
        &mut self,
        node: &NodeInfo,
        kubeconfig: &std::path::Path,
        extra: &[String],
    ) -> Result<(), ComponentError> {
        let health_addr = free_loopback_port().map_err(ComponentError::Port)?;
        let mut argv = node.koordlet_args(kubeconfig);
        argv.extend([
            format!("--health-addr={health_addr}"),
            format!("--metrics-addr={health_addr}"),
        ]);
        argv.extend(extra.iter().cloned());
        let args = koordlet::cli::Args::try_parse_from(&argv).map_err(|e| ComponentError::Flags {
            component: "koordlet",
            message: e.to_string(),
        })?;
        let stop = self.stop.clone();
        let name = format!("koordlet/{}", node.name);
        let log_name = name.clone();
        let handle = tokio::spawn(async move {
            let shutdown = async move { stop.cancelled().await };
            if let Err(error) = koordlet::agent::run_agent(args.agent, shutdown).await {
                tracing::error!(%error, koordlet = %log_name, "koordlet stopped with an error");
            }
        });
        tracing::info!(node = %node.name, %health_addr, "koordlet started");
        self.tasks.push(Task { name, handle });
        self.koordlets.push(KoordletInfo {
            node: node.name.clone(),
            health_addr,
        });
        Ok(())
    }

    /// Stops every component gracefully (each gets a few seconds, then is aborted) and removes
    /// the webhook configurations, so a cluster that outlives the components keeps admitting
    /// ConfigMaps (their webhook fails closed).
    pub async fn shutdown(mut self, cluster: &TestCluster) {
        self.stop.cancel();
        if let Some(webhook) = self.webhook.take() {
            webhook_config::remove(cluster).await;
            cluster.unregister_service(WEBHOOK_NAMESPACE, WEBHOOK_SERVICE);
            webhook.handle.graceful_shutdown(Some(Duration::from_secs(2)));
            stop_task("koord-webhook", webhook.task).await;
        }
        for task in std::mem::take(&mut self.tasks) {
            stop_task(&task.name, task.handle).await;
        }
    }
}

async fn stop_task<T>(name: &str, mut handle: JoinHandle<T>) {
    if tokio::time::timeout(STOP_PATIENCE, &mut handle).await.is_err() {
        tracing::warn!(component = name, "did not stop in time; aborting");
        handle.abort();
        let _ = handle.await;
    }
}

impl Drop for Components {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(webhook) = self.webhook.take() {
            webhook.handle.shutdown();
            webhook.task.abort();
        }
        for task in self.tasks.drain(..) {
            task.handle.abort();
        }
    }
}

/// A loopback address with a port that was free a moment ago (koordlet's `run_agent` does not
/// report the address it bound, so port 0 would leave its endpoint unknown).
fn free_loopback_port() -> std::io::Result<SocketAddr> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.local_addr()
}
