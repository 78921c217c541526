//! Calling one webhook over HTTPS: resolve `url` or `service` (through the loopback service
//! address map), verify the server certificate against `caBundle`, POST the AdmissionReview.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::ServerName;
use serde_json::Value;

/// Why a webhook call failed (subject to failurePolicy).
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// clientConfig is unusable.
    #[error("invalid clientConfig: {0}")]
    Config(String),
    /// The service is not in the address map.
    #[error("service {0} has no registered address (TestCluster::register_service)")]
    NoService(String),
    /// Connection, TLS or HTTP failure.
    #[error("{0}")]
    Transport(String),
    /// No answer within timeoutSeconds.
    #[error("context deadline exceeded (timeout {0}s)")]
    Timeout(u64),
    /// The answer is not an AdmissionReview.
    #[error("bad response: {0}")]
    BadResponse(String),
}

/// Where to send the review and which name the certificate must carry.
#[derive(Debug, Clone, PartialEq)]
pub struct Endpoint {
    /// Full URL to POST to.
    pub url: String,
    /// TLS server name to verify.
    pub server_name: String,
}

/// Resolve a `clientConfig` (pure).
pub fn resolve(
    client_config: &Value,
    services: &HashMap<(String, String), SocketAddr>,
) -> Result<Endpoint, CallError> {
    if let Some(url) = client_config.get("url").and_then(Value::as_str) {
        let uri: http::Uri = url
            .parse()
            .map_err(|e| CallError::Config(format!("url {url:?}: {e}")))?;
        if uri.scheme_str() != Some("https") {
            return Err(CallError::Config(format!("url {url:?} must use https")));
        }
        let host = uri
            .host()
            .ok_or_else(|| CallError::Config(format!("url {url:?} has no host")))?;
        return Ok(Endpoint {
            url: url.to_string(),
            server_name: host.trim_matches(['[', ']']).to_string(),
        });
    }
    let svc = client_config
        .get("service")
        .ok_or_else(|| CallError::Config("neither url nor service is set".into()))?;
    let ns = svc.get("namespace").and_then(Value::as_str).unwrap_or_default();
    let name = svc.get("name").and_then(Value::as_str).unwrap_or_default();
    let path = svc.get("path").and_then(Value::as_str).unwrap_or("/");
    let addr = services
        .get(&(ns.to_string(), name.to_string()))
        .ok_or_else(|| CallError::NoService(format!("{ns}/{name}")))?;
    let path = if path.starts_with('/') {
        path.to_string()
    } else {
        format!("/{path}")
    };
    Ok(Endpoint {
        url: format!("https://{addr}{path}"),
        server_name: format!("{name}.{ns}.svc"),
    })
}

fn tls_config(ca_bundle_b64: Option<&str>) -> Result<rustls::ClientConfig, CallError> {
    let b64 = ca_bundle_b64
        .filter(|s| !s.is_empty())
        .ok_or_else(|| CallError::Config("caBundle is empty".into()))?;
    let pem = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .map_err(|e| CallError::Config(format!("caBundle is not base64: {e}")))?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
        let cert = cert.map_err(|e| CallError::Config(format!("caBundle: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| CallError::Config(format!("caBundle: {e}")))?;
    }
    if roots.is_empty() {
        return Err(CallError::Config("caBundle holds no certificate".into()));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| CallError::Config(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// POST an AdmissionReview and return the parsed response review.
pub async fn call(
    endpoint: &Endpoint,
    ca_bundle: Option<&str>,
    review: &Value,
    timeout: Duration,
) -> Result<Value, CallError> {
    let tls = tls_config(ca_bundle)?;
    let server_name = ServerName::try_from(endpoint.server_name.clone())
        .map_err(|e| CallError::Config(format!("server name: {e}")))?;
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only()
        .with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(server_name))
        .enable_http1()
        .build();
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build(connector);
    let body = serde_json::to_vec(review).map_err(|e| CallError::Transport(e.to_string()))?;
    let req = http::Request::post(&endpoint.url)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| CallError::Config(e.to_string()))?;
    let fut = async {
        let resp = client
            .request(req)
            .await
            .map_err(|e| CallError::Transport(format!("{e:?}")))?;
        let status = resp.status();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| CallError::Transport(e.to_string()))?
            .to_bytes();
        if !status.is_success() {
            return Err(CallError::BadResponse(format!(
                "HTTP {status}: {}",
                String::from_utf8_lossy(&bytes)
            )));
        }
        serde_json::from_slice::<Value>(&bytes).map_err(|e| CallError::BadResponse(e.to_string()))
    };
    tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| CallError::Timeout(timeout.as_secs()))?
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn resolves_service_and_url() {
        let mut services = HashMap::new();
        services.insert(
            ("ns".to_string(), "wh".to_string()),
            "127.0.0.1:9443".parse().unwrap(),
        );
        let ep = resolve(
            &json!({"service": {"namespace": "ns", "name": "wh", "path": "/mutate"}}),
            &services,
        )
        .unwrap();
        assert_eq!(
            ep,
            Endpoint {
                url: "https://127.0.0.1:9443/mutate".into(),
                server_name: "wh.ns.svc".into()
            }
        );
        assert!(matches!(
            resolve(&json!({"service": {"namespace": "x", "name": "y"}}), &services),
            Err(CallError::NoService(_))
        ));
        let ep = resolve(&json!({"url": "https://localhost:1234/v"}), &services).unwrap();
        assert_eq!(ep.server_name, "localhost");
        assert!(resolve(&json!({"url": "http://localhost/v"}), &services).is_err());
        assert!(tls_config(Some("!!")).is_err());
        assert!(tls_config(None).is_err());
    }
}
