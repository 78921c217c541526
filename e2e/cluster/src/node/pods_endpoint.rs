//! The kubelet's read-only HTTP endpoint, as koordlet uses it: `GET /pods` (and `/pods/`) returns
//! the node's pods as a `PodList`, `/configz` the kubelet configuration koordlet inspects,
//! `/healthz` ok. Plain HTTP on `127.0.0.1:<random port>`.

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::routing::get;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// The pods a node currently runs, shared between the node loop (writer) and the endpoint.
pub type PodsView = Arc<RwLock<Vec<Pod>>>;

/// Serves the endpoint until `cancel` fires; returns the bound address.
pub async fn serve(
    view: PodsView,
    cancel: CancellationToken,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind((super::objects::HOST_IP, 0)).await?;
    let address = listener.local_addr()?;
    let router = Router::new()
        .route("/pods", get(pods))
        .route("/pods/", get(pods))
        .route("/configz", get(configz))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(view);
    let task = tokio::spawn(async move {
        let served = axum::serve(listener, router)
            .with_graceful_shutdown(cancel.cancelled_owned())
            .await;
        if let Err(err) = served {
            tracing::warn!(%err, "kubelet /pods endpoint stopped");
        }
    });
    Ok((address, task))
}

async fn pods(State(view): State<PodsView>) -> Json<Value> {
    let items = view
        .read()
        .map(|pods| pods.clone())
        .unwrap_or_else(|poisoned| poisoned.into_inner().clone());
    Json(json!({ "kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items }))
}

async fn configz() -> Json<Value> {
    Json(json!({ "kubeletconfig": {
        "cgroupDriver": "cgroupfs", "cgroupRoot": "/", "cgroupsPerQOS": true,
        "cpuManagerPolicy": "none", "memoryManagerPolicy": "None", "topologyManagerPolicy": "none",
    } }))
}
