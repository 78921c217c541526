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

use futures::{Stream, StreamExt};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};

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

/// Yields when the Secret `name` changes or disappears: a watch on that one Secret (field
/// selector `metadata.name`, which RBAC limited to the name allows). Watch errors are retried
/// with backoff and logged once until the watch works again; meanwhile only the interval syncs.
fn secret_changes(client: Client, namespace: &str, name: &str) -> impl Stream<Item = ()> + Send + use<> {
    let api: Api<Secret> = Api::namespaced(client, namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let (namespace, name) = (namespace.to_string(), name.to_string());
    let mut failing = false;
    watcher(api, config).default_backoff().filter_map(move |event| {
        let wake = match event {
            // A relist ends with InitDone: the Secret may have gone while the watch was down.
            Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone) => {
                if std::mem::take(&mut failing) {
                    tracing::info!(%namespace, %name, "watching the certificate Secret again");
                }
                Some(())
            }
            Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => None,
            Err(error) => {
                if !std::mem::replace(&mut failing, true) {
                    let why = if koord_runtime::watch_error_status(&error) == Some(403) {
                        "cannot watch the certificate Secret: RBAC needs list and watch on it"
                    } else {
                        "cannot watch the certificate Secret; retrying with backoff"
                    };
                    tracing::warn!(%namespace, %name, %error,
                        "{why}; meanwhile a deleted Secret is restored at the next --cert-sync-interval only");
                }
                None
            }
        };
        futures::future::ready(wake)
    })
}

/// Keeps `tls` serving the Secret's certificate: syncs every `interval`, and at once when the
/// Secret changes or is deleted (restored within a round trip instead of up to an interval
/// later), and reloads when the serving certificate changed. `on_synced` is told about every
/// successful sync (readiness).
pub async fn run_secret_mode(
    client: Client,
    source: SecretSource,
    tls: ServingTls,
    mut served: CertBundle,
    interval: Duration,
    on_synced: impl Fn(bool) + Send,
) {
    let mut changes = std::pin::pin!(secret_changes(
        client.clone(),
        &source.namespace,
        &source.secret_name
    ));
    loop {
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            Some(()) = changes.next() => tracing::debug!("certificate Secret changed: syncing now"),
        }
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
