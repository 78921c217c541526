//! The HTTPS routes kube-scheduler calls: `POST /filter` and `POST /prioritize` (the verbs of
//! the chart's `extenders` entry), thin adapters over [`crate::extender::Extender`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum_server::tls_rustls::RustlsConfig;
use jiff::Timestamp;

use crate::extender::Extender;
use crate::wire::ExtenderArgs;

/// Largest request accepted: without `nodeCacheCapable` kube-scheduler sends every candidate
/// Node object (~10 KiB each; 5,000 nodes ≈ 50 MiB).
pub const MAX_REQUEST_BYTES: usize = 96 * 1024 * 1024;

/// The extender router (no TLS; tests drive it with `oneshot`).
pub fn router(extender: Arc<Extender>) -> Router {
    Router::new()
        .route(
            "/filter",
            post(|State(extender): State<Arc<Extender>>, body: Bytes| async move {
                answer(&extender, Verb::Filter, &body)
            }),
        )
        .route(
            "/prioritize",
            post(|State(extender): State<Arc<Extender>>, body: Bytes| async move {
                answer(&extender, Verb::Prioritize, &body)
            }),
        )
        .layer(DefaultBodyLimit::max(MAX_REQUEST_BYTES))
        .with_state(extender)
}

#[derive(Clone, Copy)]
enum Verb {
    Filter,
    Prioritize,
}

impl Verb {
    fn name(self) -> &'static str {
        match self {
            Verb::Filter => "filter",
            Verb::Prioritize => "prioritize",
        }
    }
}

fn answer(extender: &Extender, verb: Verb, body: &[u8]) -> Response {
    let started = Instant::now();
    let args: ExtenderArgs = match serde_json::from_slice(body) {
        Ok(args) => args,
        Err(error) => {
            extender
                .metrics
                .observe_call(verb.name(), "bad_request", started.elapsed().as_secs_f64());
            tracing::warn!(verb = verb.name(), %error, "unreadable ExtenderArgs");
            return (
                StatusCode::BAD_REQUEST,
                format!("unreadable ExtenderArgs: {error}\n"),
            )
                .into_response();
        }
    };
    let now = Timestamp::now();
    let json = match verb {
        Verb::Filter => serde_json::to_vec(&extender.filter(&args, now)),
        Verb::Prioritize => serde_json::to_vec(&extender.prioritize(&args, now)),
    };
    extender
        .metrics
        .observe_call(verb.name(), "ok", started.elapsed().as_secs_f64());
    match json {
        Ok(json) => (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], json).into_response(),
        // Serialising our own answer cannot realistically fail.
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()).into_response(),
    }
}

/// Serves `router` over TLS on `addr` until `handle` is told to shut down.
pub async fn serve_tls(
    addr: SocketAddr,
    tls: RustlsConfig,
    router: Router,
    handle: axum_server::Handle<SocketAddr>,
) -> std::io::Result<()> {
    axum_server::bind_rustls(addr, tls)
        .handle(handle)
        .serve(router.into_make_service())
        .await
}
