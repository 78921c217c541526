//! Wiring of the server process: caches, certificate, the HTTPS listener, the admin endpoint
//! and graceful shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use koord_runtime::{Readiness, serve_admin_until_signal};
use kube::Client;
use prometheus_client::registry::Registry;

use crate::cli::Cli;
use crate::cluster::ClusterCache;
use crate::extender::Extender;
use crate::metrics::ExtenderMetrics;
use crate::server::{router, serve_tls};

/// Why the extender could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// No usable Kubernetes client configuration.
    #[error("kubernetes client: {0}")]
    Client(#[from] koord_runtime::KubeconfigError),
    /// Binding or serving failed.
    #[error("server: {0}")]
    Io(#[from] std::io::Error),
    /// The serving certificate could not be loaded.
    #[error("certificate: {0}")]
    Tls(#[from] crate::tls::TlsError),
}

/// A running extender (started in-process by `run`, tests and the e2e crate).
pub struct RunningExtender {
    /// The HTTPS address actually bound.
    pub addr: SocketAddr,
    /// Shuts the HTTPS server down.
    pub handle: axum_server::Handle<SocketAddr>,
    /// Readiness checks (`caches`).
    pub readiness: Readiness,
    /// The server task.
    pub task: tokio::task::JoinHandle<std::io::Result<()>>,
    /// The caches the decisions read.
    pub cache: ClusterCache,
}

/// Starts the caches and the HTTPS listener on `client`; metrics (with the build and process
/// metrics) go to `registry`, which must be a root registry.
pub async fn start(
    cli: &Cli,
    client: Client,
    registry: &mut Registry,
) -> Result<RunningExtender, ServeError> {
    let (tls, current) = crate::tls::load(&cli.cert_dir).await?;
    tokio::spawn(crate::tls::follow(
        cli.cert_dir.clone(),
        tls.clone(),
        current,
        cli.cert_sync_interval,
    ));
    let metrics = register_metrics(registry);
    let readiness = Readiness::default();
    readiness.register("caches");
    let cache = ClusterCache::start(
        client,
        &cli.config_namespace,
        &cli.slo_config_name,
        cli.scaling_factors(),
    );
    {
        let cache = cache.clone();
        let readiness = readiness.clone();
        tokio::spawn(async move {
            cache.wait_until_ready().await;
            tracing::info!("caches synced");
            readiness.set("caches", true);
        });
    }
    let extender = Arc::new(Extender {
        cache: cache.clone(),
        policy: cli.policy(),
        factors: cli.scaling_factors(),
        metrics,
    });
    let handle = axum_server::Handle::new();
    let addr = SocketAddr::new(cli.bind_address, cli.port);
    let task = tokio::spawn(serve_tls(addr, tls, router(extender), handle.clone()));
    let addr = handle
        .listening()
        .await
        .ok_or_else(|| ServeError::Io(std::io::Error::other(format!("cannot listen on {addr}"))))?;
    tracing::info!(%addr, "serving the scheduler extender over HTTPS");
    Ok(RunningExtender {
        addr,
        handle,
        readiness,
        task,
        cache,
    })
}

/// Registers everything the extender serves on `/metrics` in the root `registry`: its own
/// metrics, its build and the process metrics.
pub fn register_metrics(registry: &mut Registry) -> ExtenderMetrics {
    koord_runtime::register_standard_metrics(registry, "koord_scheduler_extender", env!("CARGO_PKG_VERSION"));
    ExtenderMetrics::register(registry)
}

/// Runs the extender until SIGTERM/Ctrl-C.
pub async fn run(cli: Cli) -> Result<(), ServeError> {
    let client = koord_runtime::kube_client(cli.kubeconfig.as_deref()).await?;
    let mut registry = Registry::default();
    let running = start(&cli, client, &mut registry).await?;
    let registry = Arc::new(registry);
    serve_admin_until_signal(cli.health_addr, cli.metrics_addr, registry, &running.readiness).await?;
    running.handle.graceful_shutdown(Some(Duration::from_secs(8)));
    match running.task.await {
        Ok(result) => result.map_err(ServeError::Io),
        Err(error) => Err(ServeError::Io(std::io::Error::other(error))),
    }
}
