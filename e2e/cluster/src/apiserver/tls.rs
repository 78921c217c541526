//! TLS helpers: self-signed certificates (for the optional HTTPS API server and for test
//! webhooks, whose `caBundle` is the certificate itself) and an HTTPS accept loop for axum.

use std::sync::Arc;

use axum::Router;
use base64::Engine;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// TLS set-up failures.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Certificate generation failed.
    #[error("generating a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// rustls refused the key or certificate.
    #[error("rustls: {0}")]
    Rustls(#[from] rustls::Error),
    /// PEM parsing failed.
    #[error("PEM: {0}")]
    Pem(String),
}

/// A self-signed certificate and its key, in PEM.
#[derive(Debug, Clone)]
pub struct SelfSignedCert {
    /// Certificate (PEM); also the CA bundle that verifies it.
    pub cert_pem: String,
    /// PKCS#8 private key (PEM).
    pub key_pem: String,
}

impl SelfSignedCert {
    /// A certificate valid for the given DNS names and IP addresses (e.g. `wh.ns.svc`, `127.0.0.1`).
    pub fn generate(names: &[&str]) -> Result<Self, TlsError> {
        let ck = rcgen::generate_simple_self_signed(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())?;
        Ok(Self {
            cert_pem: ck.cert.pem(),
            key_pem: ck.signing_key.serialize_pem(),
        })
    }

    /// The certificate as a webhook `caBundle` (base64 of the PEM).
    pub fn ca_bundle_base64(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(self.cert_pem.as_bytes())
    }

    /// DER of the certificate (for `kube::Config::root_cert`).
    pub fn cert_der(&self) -> Result<Vec<u8>, TlsError> {
        let mut pem = self.cert_pem.as_bytes();
        let mut certs = rustls_pemfile::certs(&mut pem);
        match certs.next() {
            Some(Ok(c)) => Ok(c.to_vec()),
            Some(Err(e)) => Err(TlsError::Pem(e.to_string())),
            None => Err(TlsError::Pem("no certificate".into())),
        }
    }

    /// A rustls server configuration presenting this certificate (ring provider, HTTP/1.1).
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let certs = rustls_pemfile::certs(&mut self.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TlsError::Pem(e.to_string()))?;
        let key = rustls_pemfile::private_key(&mut self.key_pem.as_bytes())
            .map_err(|e| TlsError::Pem(e.to_string()))?
            .ok_or_else(|| TlsError::Pem("no private key".into()))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(certs, key)?;
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(cfg))
    }
}

/// Serve a router over TLS until `cancel` fires.
pub async fn serve_tls(
    listener: TcpListener,
    config: Arc<rustls::ServerConfig>,
    router: Router,
    cancel: CancellationToken,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    loop {
        let (tcp, _) = tokio::select! {
            _ = cancel.cancelled() => return,
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    tracing::debug!(error = %e, "accept failed");
                    continue;
                }
            },
        };
        let (acceptor, router, cancel) = (acceptor.clone(), router.clone(), cancel.clone());
        tokio::spawn(async move {
            let Ok(stream) = acceptor.accept(tcp).await else {
                return;
            };
            let service = TowerToHyperService::new(router);
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
            tokio::select! {
                _ = conn => {}
                _ = cancel.cancelled() => {}
            }
        });
    }
}
