//! The serving certificate: read from a directory (a mounted `kubernetes.io/tls` Secret) and
//! re-read on an interval, so a rotated certificate is served without a restart.

use std::path::{Path, PathBuf};
use std::time::Duration;

use axum_server::tls_rustls::RustlsConfig;

/// Why the certificate could not be served.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The PEM material is not a usable certificate and key.
    #[error("certificate or key in {dir} is not usable: {source}")]
    Pem {
        /// The directory.
        dir: PathBuf,
        /// What rustls said.
        #[source]
        source: std::io::Error,
    },
}

/// Certificate and key file names in the directory (the `kubernetes.io/tls` Secret keys).
pub const CERT_FILE: &str = "tls.crt";
/// See [`CERT_FILE`].
pub const KEY_FILE: &str = "tls.key";

async fn read_pair(dir: &Path) -> Result<(Vec<u8>, Vec<u8>), TlsError> {
    let read = |name: &str| {
        let path = dir.join(name);
        async move {
            tokio::fs::read(&path)
                .await
                .map_err(|source| TlsError::Read { path, source })
        }
    };
    Ok((read(CERT_FILE).await?, read(KEY_FILE).await?))
}

/// Loads the certificate in `dir`.
pub async fn load(dir: &Path) -> Result<(RustlsConfig, (Vec<u8>, Vec<u8>)), TlsError> {
    let (cert, key) = read_pair(dir).await?;
    let config = RustlsConfig::from_pem(cert.clone(), key.clone())
        .await
        .map_err(|source| TlsError::Pem {
            dir: dir.to_path_buf(),
            source,
        })?;
    Ok((config, (cert, key)))
}

/// Re-reads `dir` every `interval` and swaps in a changed certificate; a broken one is logged
/// and the current one stays.
pub async fn follow(dir: PathBuf, config: RustlsConfig, mut current: (Vec<u8>, Vec<u8>), interval: Duration) {
    let mut ticker = tokio::time::interval(interval);
    ticker.tick().await;
    loop {
        ticker.tick().await;
        match read_pair(&dir).await {
            Ok(pair) if pair != current => match config.reload_from_pem(pair.0.clone(), pair.1.clone()).await
            {
                Ok(()) => {
                    tracing::info!(dir = %dir.display(), "serving certificate reloaded");
                    current = pair;
                }
                Err(error) => {
                    tracing::warn!(dir = %dir.display(), %error, "new certificate unusable; keeping the current one")
                }
            },
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "cannot re-read the certificate; keeping the current one"),
        }
    }
}
