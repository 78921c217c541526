//! TLS: a client trusting only the generated CA completes the handshake and gets answers;
//! rotating the serving certificate changes what new connections see, without restarting the
//! server or dropping established connections.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::sync::Arc;

use jiff::Timestamp;
use koord_webhook::certs::bundle::{CertBundle, CertPolicy, generate, sign_serving};
use koord_webhook::server::{router, serve_tls};
use koord_webhook::tls::ServingTls;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

fn names() -> Vec<String> {
    vec![
        "localhost".to_string(),
        "koordinator-webhook-service.koordinator-system.svc".to_string(),
    ]
}

fn connector(ca_pem: &str) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    TlsConnector::from(Arc::new(config))
}

async fn connect(addr: SocketAddr, ca_pem: &str) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    connector(ca_pem)
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
}

fn served_cert(stream: &TlsStream<TcpStream>) -> Vec<u8> {
    stream.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

fn pem_der(pem: &str) -> Vec<u8> {
    CertificateDer::from_pem_slice(pem.as_bytes()).unwrap().to_vec()
}

/// Sends one keep-alive admission request and returns the status line.
async fn admit(stream: &mut TlsStream<TcpStream>) -> String {
    let body = br#"{"request": {"uid": "u", "kind": {"kind": "Pod"}}}"#;
    let head = format!(
        "POST /validate-pod HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    let mut buffer = vec![0u8; 4096];
    let read = stream.read(&mut buffer).await.unwrap();
    let text = String::from_utf8_lossy(&buffer[..read]).to_string();
    text.lines().next().unwrap_or_default().to_string()
}

async fn start(bundle: &CertBundle) -> (ServingTls, SocketAddr, axum_server::Handle<SocketAddr>) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let tls = ServingTls::from_pem(bundle.cert_pem.as_bytes(), bundle.key_pem.as_bytes())
        .await
        .unwrap();
    let (state, _) = common::app_state(common::seed_view());
    let handle = axum_server::Handle::new();
    tokio::spawn(serve_tls(
        "127.0.0.1:0".parse().unwrap(),
        tls.clone(),
        router(state),
        handle.clone(),
    ));
    let addr = handle.listening().await.unwrap();
    (tls, addr, handle)
}

#[tokio::test]
async fn handshake_trusting_the_ca_and_rotation_without_restart() {
    let now = Timestamp::now();
    let policy = CertPolicy::default();
    let first = generate(&names(), now, &policy).unwrap();
    let (tls, addr, handle) = start(&first).await;

    let mut old_connection = connect(addr, &first.ca_cert_pem).await.unwrap();
    assert_eq!(served_cert(&old_connection), pem_der(&first.cert_pem));
    assert_eq!(admit(&mut old_connection).await, "HTTP/1.1 200 OK");

    // Rotate the serving certificate only: same CA, so the caBundle stays valid.
    let rotated = sign_serving(&first, &names(), now, &policy).unwrap();
    assert_eq!(rotated.ca_cert_pem, first.ca_cert_pem);
    assert_ne!(rotated.cert_pem, first.cert_pem);
    tls.reload(rotated.cert_pem.as_bytes(), rotated.key_pem.as_bytes())
        .await
        .unwrap();

    let mut new_connection = connect(addr, &first.ca_cert_pem).await.unwrap();
    assert_eq!(served_cert(&new_connection), pem_der(&rotated.cert_pem));
    assert_eq!(admit(&mut new_connection).await, "HTTP/1.1 200 OK");
    // The connection opened before the rotation keeps working.
    assert_eq!(admit(&mut old_connection).await, "HTTP/1.1 200 OK");

    // A whole new CA: clients holding the old caBundle are refused, the new one is trusted.
    let renewed = generate(&names(), now, &policy).unwrap();
    tls.reload(renewed.cert_pem.as_bytes(), renewed.key_pem.as_bytes())
        .await
        .unwrap();
    assert!(connect(addr, &first.ca_cert_pem).await.is_err());
    let mut trusted = connect(addr, &renewed.ca_cert_pem).await.unwrap();
    assert_eq!(admit(&mut trusted).await, "HTTP/1.1 200 OK");

    // Unusable material is refused and the server keeps serving the previous certificate.
    assert!(tls.reload(b"garbage", b"garbage").await.is_err());
    assert!(connect(addr, &renewed.ca_cert_pem).await.is_ok());
    handle.shutdown();
}

#[tokio::test]
async fn cert_dir_files_are_read_in_either_naming() {
    let now = Timestamp::now();
    let bundle = generate(&names(), now, &CertPolicy::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cert.pem"), &bundle.cert_pem).unwrap();
    std::fs::write(dir.path().join("key.pem"), &bundle.key_pem).unwrap();
    let (cert, key) = koord_webhook::tls::read_cert_dir(dir.path()).await.unwrap();
    assert_eq!(cert, bundle.cert_pem.as_bytes());
    assert_eq!(key, bundle.key_pem.as_bytes());
    std::fs::write(dir.path().join("tls.crt"), "new").unwrap();
    std::fs::write(dir.path().join("tls.key"), "new-key").unwrap();
    let (cert, _) = koord_webhook::tls::read_cert_dir(dir.path()).await.unwrap();
    assert_eq!(cert, b"new");
    assert!(
        koord_webhook::tls::read_cert_dir(&dir.path().join("missing"))
            .await
            .is_err()
    );
}

#[tokio::test]
async fn dir_mode_reloads_changed_files() {
    let now = Timestamp::now();
    let policy = CertPolicy::default();
    let first = generate(&names(), now, &policy).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tls.crt"), &first.cert_pem).unwrap();
    std::fs::write(dir.path().join("tls.key"), &first.key_pem).unwrap();
    let (tls, addr, handle) = start(&first).await;
    let files = koord_webhook::tls::read_cert_dir(dir.path()).await.unwrap();
    tokio::spawn(koord_webhook::certs::run_dir_mode(
        dir.path().to_path_buf(),
        tls,
        files,
        std::time::Duration::from_millis(50),
    ));
    let rotated = sign_serving(&first, &names(), now, &policy).unwrap();
    std::fs::write(dir.path().join("tls.key"), &rotated.key_pem).unwrap();
    std::fs::write(dir.path().join("tls.crt"), &rotated.cert_pem).unwrap();
    let mut served = Vec::new();
    for _ in 0..100 {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        served = served_cert(&connect(addr, &first.ca_cert_pem).await.unwrap());
        if served == pem_der(&rotated.cert_pem) {
            break;
        }
    }
    assert_eq!(served, pem_der(&rotated.cert_pem));
    handle.shutdown();
}
