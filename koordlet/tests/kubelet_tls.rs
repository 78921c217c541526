//! koordlet's kubelet client over HTTPS against a self-signed serving certificate, as a real
//! kubelet's is: verification is off by design, and the client must not depend on the system's
//! CA store either (minimal images have none). The test re-runs itself in a private mount
//! namespace with the system CA directories hidden, where root and `unshare` allow it.

use std::net::SocketAddr;
use std::process::Command;

use axum::Router;
use axum::routing::get;
use koord_testcluster::SelfSignedCert;
use koord_testcluster::apiserver::tls::serve_tls;
use koordlet::states::sources::{fetch_kubelet_pods, kubelet_client};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const INNER: &str = "kubelet_pods_over_tls_inner";

#[test]
fn kubelet_pods_fetched_over_tls_without_a_system_ca_store() {
    let exe = std::env::current_exe().unwrap();
    // Hide the CA bundle and certificate directories the system store is built from.
    let script = format!(
        "mount -t tmpfs none /etc/ssl && mount -t tmpfs none /usr/share/ca-certificates && \
         exec '{}' --exact {INNER} --ignored --nocapture",
        exe.display()
    );
    let out = match Command::new("unshare").args(["-m", "sh", "-c", &script]).output() {
        Ok(out) if out.status.success() || String::from_utf8_lossy(&out.stdout).contains(INNER) => out,
        other => {
            println!(
                "skipped: no private mount namespace here ({other:?}); running with the system CA store"
            );
            kubelet_pods_over_tls_inner();
            return;
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "inner test failed without a system CA store"
    );
    assert!(stdout.contains("1 passed"), "the inner test did not run");
}

#[tokio::test]
#[ignore = "run by kubelet_pods_fetched_over_tls_without_a_system_ca_store"]
async fn kubelet_pods_over_tls_inner() {
    let cert = SelfSignedCert::generate(&["localhost", "127.0.0.1"]).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    let router = Router::new().route(
        "/pods",
        get(|| async {
            axum::Json(json!({"kind": "PodList", "apiVersion": "v1", "items": [
                {"metadata": {"name": "ls", "namespace": "default", "uid": "6f1c1f1e-0000-4000-8000-000000000001"}}
            ]}))
        }),
    );
    let cancel = CancellationToken::new();
    let server = tokio::spawn(serve_tls(
        listener,
        cert.server_config().unwrap(),
        router,
        cancel.clone(),
    ));
    let client = kubelet_client(&format!("https://{addr}"), None).unwrap();
    let pods = fetch_kubelet_pods(&client).await.unwrap();
    cancel.cancel();
    let _ = server.await;
    assert_eq!(pods.len(), 1);
    assert_eq!(pods[0].metadata.name.as_deref(), Some("ls"));
}
