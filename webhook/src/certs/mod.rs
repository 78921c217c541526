//! Where the serving certificate comes from, and keeping it fresh while the server runs.
//!
//! Two modes:
//! - **Secret** (default): a self-signed CA and serving certificate kept in a Secret shared by all
//!   replicas, renewed well before expiry, with the CA injected into the webhook configurations.
//! - **Directory** (`--cert-dir`): files managed by someone else (cert-manager), reloaded when
//!   their content changes.

pub mod bundle;
pub mod inject;
pub mod secret;

use std::path::PathBuf;
use std::time::Duration;

use jiff::Timestamp;
use kube::Client;

pub use bundle::{CertBundle, CertError, CertPolicy, Renewal, service_dns_names};

use crate::tls::{ServingTls, TlsError, read_cert_dir};

/// Settings of the Secret mode.
#[derive(Debug, Clone)]
pub struct SecretSource {
    /// Namespace of the Secret (the webhook's own namespace).
    pub namespace: String,
    /// Secret name, `koordinator-webhook-certs` by default.
    pub secret_name: String,
    /// SANs of the serving certificate.
    pub dns_names: Vec<String>,
    /// Lifetimes and renewal margins.
    pub policy: CertPolicy,
    /// MutatingWebhookConfiguration to inject the CA into ("" = none).
    pub mutating_configuration: String,
    /// ValidatingWebhookConfiguration to inject the CA into ("" = none).
    pub validating_configuration: String,
}

/// Why a certificate sync failed.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// Keeping the Secret failed.
    #[error(transparent)]
    Secret(#[from] secret::SecretError),
    /// Injecting the caBundle failed.
    #[error(transparent)]
    Inject(#[from] inject::InjectError),
    /// The material could not be served.
    #[error(transparent)]
    Tls(#[from] TlsError),
}

/// One Secret-mode sync: ensure the Secret, serve its certificate, inject the CA. Returns the
/// bundle now served. `served` is the bundle served so far (none at start-up): a deleted
/// Secret is restored from it (see [`secret::ensure_secret`]).
pub async fn sync_from_secret(
    client: Client,
    source: &SecretSource,
    now: Timestamp,
    served: Option<&CertBundle>,
) -> Result<CertBundle, SyncError> {
    let bundle = secret::ensure_secret(
        client.clone(),
        &source.namespace,
        &source.secret_name,
        &source.dns_names,
        now,
        &source.policy,
        served,
    )
    .await?;
    let outcomes = inject::inject_ca_bundle(
        client,
        &source.mutating_configuration,
        &source.validating_configuration,
        bundle.ca_cert_pem.as_bytes(),
    )
    .await?;
    for outcome in outcomes {
        match outcome {
            inject::InjectOutcome::Updated(name) => tracing::info!(%name, "injected caBundle"),
            inject::InjectOutcome::Missing(name) => {
                tracing::warn!(%name, "webhook configuration not found; caBundle not injected")
            }
            inject::InjectOutcome::Unchanged(_) => {}
        }
    }
    Ok(bundle)
}

/// Keeps `tls` serving the Secret's certificate: syncs every `interval` and reloads when the
/// serving certificate changed. `on_synced` is told about every successful sync (readiness).
pub async fn run_secret_mode(
    client: Client,
    source: SecretSource,
    tls: ServingTls,
    mut served: CertBundle,
    interval: Duration,
    on_synced: impl Fn(bool) + Send,
) {
    loop {
        tokio::time::sleep(interval).await;
        match sync_from_secret(client.clone(), &source, Timestamp::now(), Some(&served)).await {
            Ok(bundle) => {
                if bundle.cert_pem != served.cert_pem {
                    match tls
                        .reload(bundle.cert_pem.as_bytes(), bundle.key_pem.as_bytes())
                        .await
                    {
                        Ok(()) => {
                            tracing::info!(not_after = %bundle.not_after, "serving a renewed certificate");
                            served = bundle;
                        }
                        Err(error) => {
                            tracing::error!(%error, "renewed certificate not usable; keeping the old one")
                        }
                    }
                }
                on_synced(true);
            }
            Err(error) => tracing::warn!(%error, "certificate sync failed; retrying"),
        }
    }
}

/// Keeps `tls` serving the files in `dir`, reloading when their content changes. Polling is
/// used instead of inotify because Secret volumes are swapped through symlinks, which inotify
/// on the files themselves misses.
pub async fn run_dir_mode(dir: PathBuf, tls: ServingTls, mut served: (Vec<u8>, Vec<u8>), interval: Duration) {
    loop {
        tokio::time::sleep(interval).await;
        match read_cert_dir(&dir).await {
            Ok(current) if current != served => match tls.reload(&current.0, &current.1).await {
                Ok(()) => {
                    tracing::info!(dir = %dir.display(), "reloaded certificate from the cert dir");
                    served = current;
                }
                // A writer may have replaced only one of the two files so far: try next tick.
                Err(error) => {
                    tracing::warn!(%error, "cert dir content not usable yet; keeping the old certificate")
                }
            },
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "reading the cert dir failed; keeping the old certificate"),
        }
    }
}
