//! The HTTPS admission server: four POST routes, each a thin adapter over [`crate::review`].
//! Every well-formed HTTP request gets 200 with an AdmissionReview; only transport-level
//! problems (wrong method, unknown path) get other statuses.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;

use crate::metrics::AdmissionMetrics;
use crate::review::{Decider, Endpoint, answer};
use crate::tls::ServingTls;

/// Largest review accepted: Kubernetes objects are at most ~1.5 MiB, old + new object double it.
pub const MAX_REVIEW_BYTES: usize = 8 * 1024 * 1024;

/// What the handlers share.
#[derive(Clone)]
pub struct AppState {
    /// Decisions and cluster state.
    pub decider: Decider,
    /// Admission metrics.
    pub metrics: AdmissionMetrics,
}

/// The admission router (no TLS; tests drive it with `oneshot`).
pub fn router(state: Arc<AppState>) -> Router {
    let mut router = Router::new();
    for endpoint in Endpoint::ALL {
        router = router.route(
            endpoint.path(),
            post(
                move |State(state): State<Arc<AppState>>, body: Bytes| async move {
                    handle(&state, endpoint, &body)
                },
            ),
        );
    }
    router
        .layer(DefaultBodyLimit::max(MAX_REVIEW_BYTES))
        .with_state(state)
}

fn handle(state: &AppState, endpoint: Endpoint, body: &[u8]) -> Response {
    let started = Instant::now();
    let mut roll = || rand::random_range(0..100u32);
    let answer = answer(endpoint, body, &state.decider, &mut roll);
    state.metrics.observe(
        endpoint.path(),
        answer.operation,
        answer.outcome.label(),
        started.elapsed().as_secs_f64(),
    );
    match crate::review::to_wire_json(&answer.review) {
        Ok(json) => (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], json).into_response(),
        // Serialising our own response cannot realistically fail; if it does, the API server
        // applies the failure policy.
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()).into_response(),
    }
}

/// Serves `router` over TLS on `addr` until `handle` is told to shut down.
pub async fn serve_tls(
    addr: SocketAddr,
    tls: ServingTls,
    router: Router,
    handle: axum_server::Handle<SocketAddr>,
) -> std::io::Result<()> {
    axum_server::bind_rustls(addr, tls.rustls_config())
        .handle(handle)
        .serve(router.into_make_service())
        .await
}
