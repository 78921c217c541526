//! The API server object: storage, the webhook service address map, and start-up state.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, RwLock};

use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::object::{label_namespace_name, prepare_create};
use super::pods::EvictionApi;
use super::resource::{GroupResource, Registry};
use super::store::Store;

/// Namespaces every cluster starts with.
pub const DEFAULT_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

/// The in-memory API server (transport-independent; `http` serves it).
pub struct ApiServer {
    /// All objects.
    pub(crate) store: Store,
    services: RwLock<HashMap<(String, String), SocketAddr>>,
    /// Next ClusterIP to hand out to a Service.
    pub(crate) next_cluster_ip: AtomicU32,
    /// Cancelled at teardown: ends every watch stream.
    pub(crate) cancel: CancellationToken,
    /// Which Eviction versions `pods/eviction` serves.
    pub(crate) eviction_api: EvictionApi,
    /// Bumped by [`ApiServer::expire_watches`]: every open watch ends with 410 Gone.
    pub(crate) watch_expiry: tokio::sync::watch::Sender<u64>,
}

impl ApiServer {
    /// A fresh server with the default namespaces, serving Eviction as Kubernetes 1.22+ does.
    pub fn new(history_capacity: usize) -> Arc<Self> {
        Self::with_eviction_api(history_capacity, EvictionApi::default())
    }

    /// A fresh server whose `pods/eviction` serves the versions of `eviction_api` (to test
    /// clients against an older Kubernetes release's Eviction API).
    pub fn with_eviction_api(history_capacity: usize, eviction_api: EvictionApi) -> Arc<Self> {
        let server = Arc::new(Self {
            eviction_api,
            store: Store::new(Registry::with_builtins(), history_capacity),
            services: RwLock::new(HashMap::new()),
            next_cluster_ip: AtomicU32::new(10),
            cancel: CancellationToken::new(),
            watch_expiry: tokio::sync::watch::Sender::new(0),
        });
        let registry = server.store.registry();
        if let Some(info) = registry.get(&GroupResource::new("", "namespaces")) {
            for ns in DEFAULT_NAMESPACES {
                let mut obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}, "status": {"phase": "Active"}});
                label_namespace_name(&mut obj);
                if prepare_create(&info, None, &mut obj).is_ok() {
                    let _ = server
                        .store
                        .create(&info.group_resource(), (String::new(), ns.to_string()), obj);
                }
            }
        }
        server
    }

    /// Map a Service (namespace, name) to a loopback address for webhook calls.
    pub fn register_service(&self, namespace: &str, name: &str, addr: SocketAddr) {
        let mut map = self
            .services
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        map.insert((namespace.to_string(), name.to_string()), addr);
    }

    /// Remove a Service address.
    pub fn unregister_service(&self, namespace: &str, name: &str) {
        let mut map = self
            .services
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        map.remove(&(namespace.to_string(), name.to_string()));
    }

    /// Snapshot of the service address map.
    pub fn services(&self) -> HashMap<(String, String), SocketAddr> {
        self.services
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// A watch-expiry storm (a test hook for what a real API server does after an etcd
    /// compaction or restart): the history is compacted and every open watch ends with an
    /// ERROR event carrying 410 Gone, so every client has to list again at once. Returns the
    /// resource version lists start from.
    pub fn expire_watches(&self) -> u64 {
        let rv = self.store.compact();
        self.watch_expiry.send_modify(|generation| *generation += 1);
        rv
    }

    /// Current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.store.current_rv()
    }

    /// End all watch streams (teardown).
    pub fn shutdown(&self) {
        self.cancel.cancel();
    }
}
