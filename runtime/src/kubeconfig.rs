//! The Kubernetes client configuration every binary builds the same way.

use std::path::{Path, PathBuf};

use thiserror::Error;

/// Why no client configuration could be built.
#[derive(Debug, Error)]
pub enum KubeconfigError {
    /// `--kubeconfig` names a file that cannot be read or parsed.
    #[error("reading kubeconfig {path}: {source}")]
    Read {
        /// The file given.
        path: PathBuf,
        /// What went wrong.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// The file was read but its current context is unusable.
    #[error("kubeconfig {path}: {source}")]
    Load {
        /// The file given.
        path: PathBuf,
        /// What went wrong.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// Neither `$KUBECONFIG`, `~/.kube/config` nor the in-cluster service account works.
    #[error(
        "no kubeconfig given and none found in $KUBECONFIG, ~/.kube/config or the in-cluster service account: {0}"
    )]
    Infer(#[source] kube::config::InferConfigError),
    /// The configuration is complete but a client cannot be built from it (TLS, proxy).
    #[error("building the Kubernetes client: {0}")]
    Client(#[source] kube::Error),
}

/// The client configuration from `path` (the `--kubeconfig` flag) when given, else inferred from
/// the environment: `$KUBECONFIG`, `~/.kube/config`, then the in-cluster service account.
pub async fn kube_config(path: Option<&Path>) -> Result<kube::Config, KubeconfigError> {
    match path {
        Some(path) => {
            let kubeconfig =
                kube::config::Kubeconfig::read_from(path).map_err(|source| KubeconfigError::Read {
                    path: path.to_path_buf(),
                    source,
                })?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|source| KubeconfigError::Load {
                    path: path.to_path_buf(),
                    source,
                })
        }
        None => kube::Config::infer().await.map_err(KubeconfigError::Infer),
    }
}

/// A client for [`kube_config`].
pub async fn kube_client(path: Option<&Path>) -> Result<kube::Client, KubeconfigError> {
    kube::Client::try_from(kube_config(path).await?).map_err(KubeconfigError::Client)
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    const KUBECONFIG: &str = "apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: 'https://127.0.0.1:6443', insecure-skip-tls-verify: true}
users:
- name: u
  user: {token: abc}
contexts:
- name: ctx
  context: {cluster: c, user: u, namespace: team-a}
current-context: ctx
";

    #[tokio::test]
    async fn reads_the_given_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config");
        std::fs::write(&path, KUBECONFIG).unwrap();
        let config = kube_config(Some(&path)).await.unwrap();
        assert_eq!(config.cluster_url.to_string(), "https://127.0.0.1:6443/");
        assert_eq!(config.default_namespace, "team-a");
        kube_client(Some(&path)).await.unwrap();
    }

    #[tokio::test]
    async fn a_missing_file_names_the_path_and_keeps_the_cause() {
        let err = kube_config(Some(Path::new("/nonexistent/kubeconfig")))
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("reading kubeconfig /nonexistent/kubeconfig: "),
            "{err}"
        );
        assert!(err.source().is_some(), "the I/O cause is kept");
    }

    #[tokio::test]
    async fn an_unusable_context_is_a_load_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config");
        std::fs::write(
            &path,
            KUBECONFIG.replace("current-context: ctx", "current-context: gone"),
        )
        .unwrap();
        let err = kube_config(Some(&path)).await.unwrap_err();
        assert!(matches!(err, KubeconfigError::Load { .. }), "{err:?}");
        assert!(err.source().is_some());
    }
}
