//! The plain-HTTP admin endpoint: `/healthz`, `/readyz`, `/metrics`.
//!
//! Liveness only says the process answers. Readiness is the conjunction of named checks the
//! component registers (for example "config loaded", "certificates served"), and its body
//! names each check, so `kubectl describe pod` shows why a replica is not ready.

use std::{
    collections::BTreeMap,
    future::Future,
    net::SocketAddr,
    sync::{Arc, RwLock},
};

use axum::{Router, extract::State, http::StatusCode, response::IntoResponse, routing::get};
use prometheus_client::{encoding::text::encode, registry::Registry};

/// Named readiness checks; cheap to clone and share with the tasks that flip them.
#[derive(Clone, Debug, Default)]
pub struct Readiness {
    checks: Arc<RwLock<BTreeMap<String, bool>>>,
}

impl Readiness {
    /// Registers `name` as not yet ready. `/readyz` fails until every check is ready.
    pub fn register(&self, name: &str) {
        self.set(name, false);
    }

    /// Marks `name` ready or not.
    pub fn set(&self, name: &str, ready: bool) {
        // A poisoned lock only means a writer panicked mid-insert of a bool: the map is intact.
        let mut checks = self.checks.write().unwrap_or_else(|poison| poison.into_inner());
        checks.insert(name.to_owned(), ready);
    }

    /// True when every registered check is ready.
    pub fn is_ready(&self) -> bool {
        self.snapshot().values().all(|ready| *ready)
    }

    /// The current state of every check.
    pub fn snapshot(&self) -> BTreeMap<String, bool> {
        self.checks
            .read()
            .unwrap_or_else(|poison| poison.into_inner())
            .clone()
    }
}

#[derive(Clone)]
struct AdminState {
    registry: Arc<Registry>,
    readiness: Readiness,
}

/// A running admin server.
#[derive(Debug)]
pub struct AdminServer {
    /// The address actually bound (useful when asked for port 0).
    pub local_addr: SocketAddr,
    /// The serving task; it ends when the shutdown future resolves.
    pub task: tokio::task::JoinHandle<()>,
}

/// The router, separate from the listener so that tests can drive it with `oneshot`.
pub fn admin_router(registry: Arc<Registry>, readiness: Readiness) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(AdminState { registry, readiness })
}

/// Binds `addr` and serves the admin endpoints until `shutdown` resolves.
pub async fn serve_admin(
    addr: SocketAddr,
    registry: Arc<Registry>,
    readiness: Readiness,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<AdminServer> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local_addr = listener.local_addr()?;
    let app = admin_router(registry, readiness);
    let task = tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).with_graceful_shutdown(shutdown).await {
            tracing::error!(%error, "admin server stopped with an error");
        }
    });
    tracing::info!(%local_addr, "serving /healthz, /readyz and /metrics");
    Ok(AdminServer { local_addr, task })
}

/// Serves the admin endpoints on `health_addr` and, when it differs, on `metrics_addr` too (the
/// chart may give metrics their own port); each server stops when its `shutdown()` future
/// resolves. Returns the server on `health_addr`.
pub async fn serve_admin_pair<F>(
    health_addr: SocketAddr,
    metrics_addr: SocketAddr,
    registry: Arc<Registry>,
    readiness: &Readiness,
    shutdown: impl Fn() -> F,
) -> std::io::Result<AdminServer>
where
    F: Future<Output = ()> + Send + 'static,
{
    let health = serve_admin(health_addr, registry.clone(), readiness.clone(), shutdown()).await?;
    if metrics_addr != health_addr {
        serve_admin(metrics_addr, registry, readiness.clone(), shutdown()).await?;
    }
    Ok(health)
}

/// For a server that runs until the process is asked to stop: serves the admin endpoints (as
/// [`serve_admin_pair`]), waits for SIGTERM/Ctrl-C, then stops the admin servers. The caller
/// shuts its own server down after this returns.
pub async fn serve_admin_until_signal(
    health_addr: SocketAddr,
    metrics_addr: SocketAddr,
    registry: Arc<Registry>,
    readiness: &Readiness,
) -> std::io::Result<()> {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    };
    serve_admin_pair(health_addr, metrics_addr, registry, readiness, stopped).await?;
    crate::shutdown_signal().await;
    tracing::info!("shutting down");
    let _ = stop_tx.send(true);
    Ok(())
}

async fn readyz(State(state): State<AdminState>) -> impl IntoResponse {
    let checks = state.readiness.snapshot();
    let mut body = String::new();
    for (name, ready) in &checks {
        body.push_str(if *ready { "[+] " } else { "[-] " });
        body.push_str(name);
        body.push('\n');
    }
    if checks.values().all(|ready| *ready) {
        body.push_str("ready\n");
        (StatusCode::OK, body)
    } else {
        body.push_str("not ready\n");
        (StatusCode::SERVICE_UNAVAILABLE, body)
    }
}

async fn metrics(State(state): State<AdminState>) -> impl IntoResponse {
    let mut body = String::new();
    match encode(&mut body, &state.registry) {
        Ok(()) => (
            StatusCode::OK,
            [(
                "content-type",
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        )
            .into_response(),
        Err(error) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot encode metrics: {error}\n"),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use http_body_util::BodyExt;
    use prometheus_client::metrics::counter::Counter;
    use tower::ServiceExt;

    async fn get_path(app: Router, path: &str) -> (StatusCode, String) {
        let response = app
            .oneshot(axum::http::Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn readyz_fails_until_every_check_is_ready_and_names_them() {
        let readiness = Readiness::default();
        readiness.register("config-loaded");
        readiness.register("informers-synced");
        readiness.set("informers-synced", true);
        let app = admin_router(Arc::new(Registry::default()), readiness.clone());
        let (status, body) = get_path(app.clone(), "/readyz").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.contains("[-] config-loaded"), "{body}");
        assert!(body.contains("[+] informers-synced"), "{body}");
        readiness.set("config-loaded", true);
        let (status, _) = get_path(app, "/readyz").await;
        assert_eq!(status, StatusCode::OK);
    }

    #[tokio::test]
    async fn healthz_answers_and_metrics_are_encoded() {
        let mut registry = Registry::with_prefix("koord_test");
        let counter = Counter::<u64>::default();
        registry.register("reconciles", "reconciles done", counter.clone());
        counter.inc();
        let app = admin_router(Arc::new(registry), Readiness::default());
        let (status, body) = get_path(app.clone(), "/healthz").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "ok\n"));
        let (status, body) = get_path(app, "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert!(body.contains("koord_test_reconciles_total 1"), "{body}");
    }

    #[tokio::test]
    async fn serve_admin_binds_and_stops_on_shutdown() {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let server = serve_admin(
            "127.0.0.1:0".parse().unwrap(),
            Arc::new(Registry::default()),
            Readiness::default(),
            async {
                let _ = rx.await;
            },
        )
        .await
        .unwrap();
        assert_ne!(server.local_addr.port(), 0);
        tx.send(()).unwrap();
        server.task.await.unwrap();
    }
}
