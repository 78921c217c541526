//! Wiring of the server process: admin endpoints, caches, certificates, the TLS listener and
//! graceful shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use koord_runtime::{Readiness, serve_admin_until_signal};
use kube::Client;
use prometheus_client::registry::Registry;

use crate::certs::{self, CertPolicy, SecretSource, service_dns_names};
use crate::cli::{CertMode, ServerArgs};
use crate::cluster::ReflectorView;
use crate::metrics::AdmissionMetrics;
use crate::mutate::MutationOptions;
use crate::review::Decider;
use crate::server::{AppState, router, serve_tls};
use crate::tls::{ServingTls, read_cert_dir};
use crate::validate::pod::PodValidationOptions;

/// How long the first certificate sync may take before start-up fails (upstream's limit).
const FIRST_SYNC_LIMIT: Duration = Duration::from_secs(20);

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// No usable Kubernetes client configuration.
    #[error("kubernetes client: {0}")]
    Client(#[from] koord_runtime::KubeconfigError),
    /// Binding or serving failed.
    #[error("server: {0}")]
    Io(#[from] std::io::Error),
    /// The serving certificate could not be read or loaded.
    #[error("certificates: {0}")]
    Tls(#[from] crate::tls::TlsError),
    /// The certificate Secret could not be synced.
    #[error("certificates: {0}")]
    CertSync(#[from] certs::SyncError),
    /// The first certificate sync did not finish in time (upstream's start-up limit).
    #[error("certificates: the first sync took longer than {0:?}")]
    CertSyncTimeout(Duration),
}

/// Builds the Kubernetes client from `--kubeconfig` or the environment.
pub async fn client(args: &ServerArgs) -> Result<Client, ServeError> {
    Ok(koord_runtime::kube_client(args.kubeconfig.as_deref()).await?)
}

/// A running admission server (started in-process by `run`, tests and the e2e crate).
pub struct RunningWebhook {
    /// The HTTPS address actually bound.
    pub addr: SocketAddr,
    /// Shuts the HTTPS server down.
    pub handle: axum_server::Handle<SocketAddr>,
    /// Readiness checks (`certificates`, `caches`).
    pub readiness: Readiness,
    /// The server task.
    pub task: tokio::task::JoinHandle<std::io::Result<()>>,
    /// The cluster caches, for callers that wait until they are synced.
    pub view: ReflectorView,
}

impl RunningWebhook {
    /// Resolves once the caches have their initial lists.
    pub async fn caches_synced(&self) {
        let _ = self.view.wait_until_ready().await;
    }
}

/// Starts caches, certificates and the HTTPS listener on `client`; metrics (with the build and
/// process metrics) go to `registry`, which must be a root registry.
pub async fn start(
    args: &ServerArgs,
    client: Client,
    registry: &mut Registry,
) -> Result<RunningWebhook, ServeError> {
    koord_runtime::register_standard_metrics(registry, "koord_webhook", env!("CARGO_PKG_VERSION"));
    let metrics = AdmissionMetrics::register(registry);
    let readiness = Readiness::default();
    readiness.register("certificates");
    readiness.register("caches");
    let view = ReflectorView::start(client.clone());
    {
        let view = view.clone();
        let readiness = readiness.clone();
        tokio::spawn(async move {
            if view.wait_until_ready().await.is_ok() {
                tracing::info!("caches synced");
                readiness.set("caches", true);
            }
        });
    }
    let tls = prepare_certificates(args, client, &readiness).await?;
    let state = Arc::new(AppState {
        decider: Decider {
            view: Arc::new(view.clone()),
            mutation: MutationOptions {
                skip_mutating_resources: args.skip_mutating_resources,
                extended_resource_spec: !args.disable_extended_resource_spec,
            },
            pod_validation: PodValidationOptions {
                allow_priority_label_update: args.allow_priority_label_update,
            },
            config_namespace: args.config_namespace.clone(),
            slo_config_name: args.slo_config_name.clone(),
            excluded_namespaces: args.excluded_namespaces(),
        },
        metrics,
    });
    let excluded: Vec<String> = state
        .decider
        .excluded_namespaces
        .names()
        .map(str::to_string)
        .collect();
    let handle = axum_server::Handle::new();
    let addr = SocketAddr::new(args.bind_address, args.port);
    let task = tokio::spawn(serve_tls(addr, tls, router(state), handle.clone()));
    let addr = handle
        .listening()
        .await
        .ok_or_else(|| ServeError::Io(std::io::Error::other(format!("cannot listen on {addr}"))))?;
    tracing::info!(%addr, excluded_namespaces = ?excluded, "serving admission over HTTPS");
    Ok(RunningWebhook {
        addr,
        handle,
        readiness,
        task,
        view,
    })
}

/// Runs the admission server until SIGTERM/Ctrl-C.
pub async fn run(args: ServerArgs) -> Result<(), ServeError> {
    let client = client(&args).await?;
    let mut registry = Registry::default();
    let running = start(&args, client, &mut registry).await?;
    let registry = Arc::new(registry);
    serve_admin_until_signal(args.health_addr, args.metrics_addr, registry, &running.readiness).await?;
    running.handle.graceful_shutdown(Some(Duration::from_secs(8)));
    match running.task.await {
        Ok(result) => result.map_err(ServeError::Io),
        Err(error) => Err(ServeError::Io(std::io::Error::other(error))),
    }
}

async fn prepare_certificates(
    args: &ServerArgs,
    client: Client,
    readiness: &Readiness,
) -> Result<ServingTls, ServeError> {
    match args.cert_mode {
        CertMode::Dir => {
            let files = read_cert_dir(&args.cert_dir).await?;
            let tls = ServingTls::from_pem(&files.0, &files.1).await?;
            readiness.set("certificates", true);
            tokio::spawn(certs::run_dir_mode(
                args.cert_dir.clone(),
                tls.clone(),
                files,
                args.cert_sync_interval,
            ));
            Ok(tls)
        }
        CertMode::Secret => {
            let mut dns_names = service_dns_names(&args.service_name, &args.namespace);
            dns_names.extend(args.webhook_host.iter().cloned());
            let source = SecretSource {
                namespace: args.namespace.clone(),
                secret_name: args.secret_name.clone(),
                dns_names,
                policy: CertPolicy::default(),
                mutating_configuration: args.mutating_webhook_name.clone(),
                validating_configuration: args.validating_webhook_name.clone(),
            };
            // Like upstream, start-up fails if the first sync does not finish in 20 s.
            let first = tokio::time::timeout(
                FIRST_SYNC_LIMIT,
                certs::sync_from_secret(client.clone(), &source, Timestamp::now(), None),
            )
            .await
            .map_err(|_| ServeError::CertSyncTimeout(FIRST_SYNC_LIMIT))??;
            let tls = ServingTls::from_pem(first.cert_pem.as_bytes(), first.key_pem.as_bytes()).await?;
            readiness.set("certificates", true);
            let ready = readiness.clone();
            tokio::spawn(certs::run_secret_mode(
                client,
                source,
                tls.clone(),
                first,
                args.cert_sync_interval,
                move |ok| ready.set("certificates", ok),
            ));
            Ok(tls)
        }
    }
}
