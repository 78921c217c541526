//! The serving TLS configuration, swappable while the server runs.
//!
//! axum-server keeps the rustls `ServerConfig` behind an atomic pointer; reloading replaces it
//! for new handshakes while established connections keep going, so a rotation never drops the
//! server or in-flight admissions.

use std::path::{Path, PathBuf};

use axum_server::tls_rustls::RustlsConfig;

/// Why a certificate could not be served.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The PEM material does not form a usable certificate and key.
    #[error("certificate or key is not usable: {0}")]
    Pem(#[source] std::io::Error),
    /// A certificate file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// The TLS configuration the admission server serves with.
#[derive(Clone, Debug)]
pub struct ServingTls {
    config: RustlsConfig,
}

impl ServingTls {
    /// Builds from a PEM certificate chain and private key.
    pub async fn from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<Self, TlsError> {
        let config = RustlsConfig::from_pem(cert_pem.to_vec(), key_pem.to_vec())
            .await
            .map_err(TlsError::Pem)?;
        Ok(Self { config })
    }

    /// Swaps in a new certificate for all future handshakes. On error the old one stays.
    pub async fn reload(&self, cert_pem: &[u8], key_pem: &[u8]) -> Result<(), TlsError> {
        self.config
            .reload_from_pem(cert_pem.to_vec(), key_pem.to_vec())
            .await
            .map_err(TlsError::Pem)
    }

    /// The handle axum-server binds with.
    pub fn rustls_config(&self) -> RustlsConfig {
        self.config.clone()
    }
}

/// Certificate and key file names in a `--cert-dir`, in the order tried: the
/// `kubernetes.io/tls` names cert-manager writes, then upstream Koordinator's names.
pub const CERT_DIR_FILES: [(&str, &str); 2] = [("tls.crt", "tls.key"), ("cert.pem", "key.pem")];

/// Reads the certificate and key from `dir`.
pub async fn read_cert_dir(dir: &Path) -> Result<(Vec<u8>, Vec<u8>), TlsError> {
    let mut last_error = None;
    for (cert_name, key_name) in CERT_DIR_FILES {
        let cert_path = dir.join(cert_name);
        let key_path = dir.join(key_name);
        match (
            tokio::fs::read(&cert_path).await,
            tokio::fs::read(&key_path).await,
        ) {
            (Ok(cert), Ok(key)) => return Ok((cert, key)),
            (Err(source), _) => {
                last_error = Some(TlsError::Read {
                    path: cert_path,
                    source,
                })
            }
            (_, Err(source)) => {
                last_error = Some(TlsError::Read {
                    path: key_path,
                    source,
                })
            }
        }
    }
    Err(last_error.unwrap_or_else(|| TlsError::Read {
        path: dir.to_path_buf(),
        source: std::io::Error::from(std::io::ErrorKind::NotFound),
    }))
}
