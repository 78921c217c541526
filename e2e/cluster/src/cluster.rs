//! `TestCluster`: an API server on loopback in its own runtime, with the kubeconfig and
//! `kube::Client` that components and tests use, torn down on drop.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::apiserver::http::{HttpState, router};
use crate::apiserver::ops::{Target, WriteParams};
pub use crate::apiserver::pods::EvictionApi;
use crate::apiserver::resource::GroupResource;
use crate::apiserver::tls::{SelfSignedCert, TlsError, serve_tls};
use crate::apiserver::{ApiError, ApiServer};

/// Errors starting or using a test cluster.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// Socket or file I/O.
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    /// Certificate set-up.
    #[error("TLS: {0}")]
    Tls(#[from] TlsError),
    /// Building the kube client.
    #[error("kube client: {0}")]
    Kube(#[from] kube::Error),
    /// A manifest could not be parsed.
    #[error("manifest {path}: {source}")]
    Manifest {
        /// File.
        path: String,
        /// What is wrong.
        #[source]
        source: serde_yaml::Error,
    },
    /// The API server refused an object.
    #[error("API: {0}")]
    Api(#[from] ApiError),
}

/// How to start a cluster.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// Listen address (default `127.0.0.1:0`, an ephemeral port).
    pub bind: SocketAddr,
    /// Serve HTTPS with a self-signed certificate instead of plain HTTP.
    pub https: bool,
    /// Changes kept for watch resume; older versions get 410 Gone.
    pub history_capacity: usize,
    /// Worker threads of the server's own runtime.
    pub worker_threads: usize,
    /// Period of watch BOOKMARK events (when the client allows them).
    pub bookmark_interval: Duration,
    /// Eviction versions served by `pods/eviction` (default: `policy/v1` and `policy/v1beta1`,
    /// as Kubernetes 1.22+; [`EvictionApi::V1beta1Only`] is Kubernetes 1.18 to 1.21).
    pub eviction_api: EvictionApi,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            https: false,
            history_capacity: 100_000,
            worker_threads: 2,
            bookmark_interval: Duration::from_secs(5),
            eviction_api: EvictionApi::default(),
        }
    }
}

/// A running embedded API server. Dropping it stops the server and every watch.
pub struct TestCluster {
    server: Arc<ApiServer>,
    addr: SocketAddr,
    cert: Option<SelfSignedCert>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl TestCluster {
    /// Start a server. It runs on its own runtime, so it keeps serving even while the caller's
    /// runtime blocks (e.g. on a `kubectl` child process).
    pub async fn start(opts: ClusterOptions) -> Result<Self, ClusterError> {
        let listener = std::net::TcpListener::bind(opts.bind)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let server = ApiServer::with_eviction_api(opts.history_capacity, opts.eviction_api);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(opts.worker_threads.max(1))
            .thread_name("koord-apiserver")
            .enable_all()
            .build()?;
        let state = HttpState {
            server: server.clone(),
            address: addr.to_string(),
            bookmark_every: opts.bookmark_interval,
        };
        let app = router(state);
        let cancel = server.cancel.clone();
        let cert = if opts.https {
            Some(SelfSignedCert::generate(&["localhost", "127.0.0.1"])?)
        } else {
            None
        };
        let tls = cert.as_ref().map(SelfSignedCert::server_config).transpose()?;
        runtime.spawn(async move {
            let listener = match tokio::net::TcpListener::from_std(listener) {
                Ok(l) => l,
                Err(e) => {
                    tracing::error!(error = %e, "API server listener");
                    return;
                }
            };
            match tls {
                Some(cfg) => serve_tls(listener, cfg, app, cancel).await,
                None => {
                    let shutdown = cancel.clone();
                    if let Err(e) = axum::serve(listener, app)
                        .with_graceful_shutdown(async move { shutdown.cancelled().await })
                        .await
                    {
                        tracing::error!(error = %e, "API server stopped");
                    }
                }
            }
        });
        tracing::info!(%addr, https = opts.https, "embedded API server listening");
        Ok(Self {
            server,
            addr,
            cert,
            runtime: Some(runtime),
        })
    }

    /// Base URL, e.g. `http://127.0.0.1:40123`.
    pub fn url(&self) -> String {
        let scheme = if self.cert.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// Listen address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The server itself (in-process access for harness code).
    pub fn api_server(&self) -> &Arc<ApiServer> {
        &self.server
    }

    /// A `kube::Config` pointing at this server (namespace `default`).
    pub fn kube_config(&self) -> kube::Config {
        // The URL is built from a SocketAddr, so it always parses.
        let uri: http::Uri = self.url().parse().unwrap_or_default();
        let mut cfg = kube::Config::new(uri);
        if let Some(der) = self.cert.as_ref().and_then(|c| c.cert_der().ok()) {
            cfg.root_cert = Some(vec![der]);
        }
        cfg
    }

    /// A kube client for this server.
    pub fn client(&self) -> Result<kube::Client, ClusterError> {
        Ok(kube::Client::try_from(self.kube_config())?)
    }

    /// kubeconfig YAML for kubectl or a component's `--kubeconfig`.
    pub fn kubeconfig_yaml(&self) -> String {
        let ca = self
            .cert
            .as_ref()
            .map(|c| format!("\n    certificate-authority-data: {}", c.ca_bundle_base64()))
            .unwrap_or_default();
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: koord-test\n  cluster:\n    server: {}{ca}\n\
             users:\n- name: koord-admin\n  user: {{}}\ncontexts:\n- name: koord-test\n  context:\n    cluster: koord-test\n\
             \x20   user: koord-admin\n    namespace: default\ncurrent-context: koord-test\n",
            self.url()
        )
    }

    /// Write the kubeconfig to a file.
    pub fn write_kubeconfig(&self, path: impl AsRef<Path>) -> Result<(), ClusterError> {
        std::fs::write(path, self.kubeconfig_yaml())?;
        Ok(())
    }

    /// Make `service` references in webhook configurations reach `addr`.
    pub fn register_service(&self, namespace: &str, name: &str, addr: SocketAddr) {
        self.server.register_service(namespace, name, addr);
    }

    /// Forget a service address.
    pub fn unregister_service(&self, namespace: &str, name: &str) {
        self.server.unregister_service(namespace, name);
    }

    /// Create (or replace) every CustomResourceDefinition in the `*.yaml`/`*.yml` files of a
    /// directory; returns the CRD names, which are served as soon as this returns.
    pub async fn install_crds_from_dir(&self, dir: impl AsRef<Path>) -> Result<Vec<String>, ClusterError> {
        let mut files: Vec<_> = std::fs::read_dir(dir.as_ref())?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
            .collect();
        files.sort();
        let mut names = Vec::new();
        for f in files {
            let text = std::fs::read_to_string(&f)?;
            for doc in parse_documents(&text).map_err(|source| ClusterError::Manifest {
                path: f.display().to_string(),
                source,
            })? {
                if doc.get("kind").and_then(Value::as_str) != Some("CustomResourceDefinition") {
                    continue;
                }
                names.push(self.apply_object(doc).await?);
            }
        }
        Ok(names)
    }

    /// Create or replace any object of a served kind (in-process, no HTTP); returns its name.
    pub async fn apply_object(&self, obj: Value) -> Result<String, ClusterError> {
        let av = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
        let (group, version) = av.rsplit_once('/').unwrap_or(("", av));
        let reg = self.server.store.registry();
        let info = reg
            .all()
            .find(|i| i.group == group && i.kind == kind && i.versions.iter().any(|v| v == version))
            .cloned()
            .ok_or_else(|| ApiError::no_route(&format!("{av} {kind}")))?;
        let name = obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let namespace = info.namespaced.then(|| {
            obj.pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or("default")
                .to_string()
        });
        let t = Target {
            info: info.clone(),
            version: version.to_string(),
            namespace,
            name: None,
            subresource: None,
        };
        let p = WriteParams {
            field_manager: "koord-testcluster".into(),
            explicit_manager: true,
            ..Default::default()
        };
        let exists = self
            .server
            .store
            .get(&GroupResource::new(group, &info.plural), t.ns(), &name)
            .is_some();
        let out = if exists {
            let mut body = obj.clone();
            if let Some(m) = body.get_mut("metadata").and_then(Value::as_object_mut) {
                m.remove("resourceVersion");
            }
            self.server
                .replace(
                    &Target {
                        name: Some(name),
                        ..t
                    },
                    body,
                    &p,
                )
                .await?
        } else {
            self.server.create(&t, obj, &p).await?
        };
        Ok(out
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string())
    }
}

/// Split multi-document YAML into JSON values (empty documents skipped).
pub fn parse_documents(text: &str) -> Result<Vec<Value>, serde_yaml::Error> {
    use serde::Deserialize;
    let mut out = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(text) {
        let v = Value::deserialize(doc)?;
        if !v.is_null() {
            out.push(v);
        }
    }
    Ok(out)
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        self.server.shutdown();
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}
