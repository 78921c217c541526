//! Admissions over TLS on loopback with keep-alive: a small load generator with N concurrent
//! connections against the real server. Prints admissions/s and latency percentiles.
//! `KOORD_BENCH_SECONDS` (default 5) and `KOORD_BENCH_CONNECTIONS` (default 16) tune it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use jiff::Timestamp;
use koord_webhook::certs::bundle::{CertPolicy, generate};
use koord_webhook::metrics::AdmissionMetrics;
use koord_webhook::review::Decider;
use koord_webhook::server::{AppState, router, serve_tls};
use koord_webhook::tls::ServingTls;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run());
}

async fn run() {
    let seconds = env_or("KOORD_BENCH_SECONDS", 5);
    let connections = env_or("KOORD_BENCH_CONNECTIONS", 16);
    let bundle = generate(
        &["localhost".to_string()],
        Timestamp::now(),
        &CertPolicy::default(),
    )
    .unwrap();
    let tls = ServingTls::from_pem(bundle.cert_pem.as_bytes(), bundle.key_pem.as_bytes())
        .await
        .unwrap();
    let mut registry = prometheus_client::registry::Registry::default();
    let state = Arc::new(AppState {
        decider: Decider::new(Arc::new(common::view())),
        metrics: AdmissionMetrics::register(&mut registry),
    });
    let handle = axum_server::Handle::new();
    tokio::spawn(serve_tls(
        "127.0.0.1:0".parse().unwrap(),
        tls,
        router(state),
        handle.clone(),
    ));
    let addr = handle.listening().await.unwrap();

    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(bundle.ca_cert_pem.as_bytes()).unwrap())
        .unwrap();
    let client_tls = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let url = format!("https://localhost:{}/mutate-pod", addr.port());
    let body = Bytes::from(common::review_body());
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let workers: Vec<_> = (0..connections)
        .map(|_| {
            // One client per worker, each holding one keep-alive connection.
            let connector = hyper_rustls::HttpsConnectorBuilder::new()
                .with_tls_config(client_tls.clone())
                .https_only()
                .enable_http1()
                .build();
            let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new())
                .pool_max_idle_per_host(1)
                .build(connector);
            let (url, body) = (url.clone(), body.clone());
            tokio::spawn(async move {
                let mut samples = Vec::new();
                while Instant::now() < deadline {
                    let request = http::Request::post(&url)
                        .header("content-type", "application/json")
                        .body(Full::new(body.clone()))
                        .unwrap();
                    let sent = Instant::now();
                    let response = client.request(request).await.unwrap();
                    assert_eq!(response.status(), 200);
                    let bytes = response.into_body().collect().await.unwrap().to_bytes();
                    assert!(bytes.len() > 100);
                    samples.push(sent.elapsed().as_nanos() as u64);
                }
                samples
            })
        })
        .collect();
    let mut samples = Vec::new();
    for worker in workers {
        samples.extend(worker.await.unwrap());
    }
    let elapsed = started.elapsed().as_secs_f64();
    samples.sort_unstable();
    println!(
        "TLS loopback keep-alive: connections={connections} seconds={seconds} admissions={} rate={:.0}/s p50={:.0}us p99={:.0}us max={:.0}us",
        samples.len(),
        samples.len() as f64 / elapsed,
        common::percentile_us(&samples, 0.50),
        common::percentile_us(&samples, 0.99),
        common::percentile_us(&samples, 1.0),
    );
    handle.shutdown();
}
