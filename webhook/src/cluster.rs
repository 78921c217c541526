//! The live [`ClusterView`]: reflector caches of ClusterColocationProfiles, Namespaces,
//! PriorityClasses and Nodes. Profiles are compiled once per resourceVersion, so a request
//! only evaluates pre-parsed selectors.
//!
//! Namespaces and Nodes are read only for their labels, so they are watched metadata-only
//! (`PartialObjectMetadata`: the API server sends no spec or status) and each cached object is
//! trimmed to its name, labels and resourceVersion: a Node's status (images, conditions) and
//! `managedFields` are most of its bytes, and a cluster has thousands of them.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use koord_api::profile::ClusterColocationProfile;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};

use crate::mutate::profile::CompiledProfile;
use crate::view::{ClusterView, PriorityClassInfo};

type ProfileCache = HashMap<String, (String, Arc<CompiledProfile>)>;

/// Reflector-backed cluster state.
#[derive(Clone)]
pub struct ReflectorView {
    profiles: Store<ClusterColocationProfile>,
    namespaces: Store<PartialObjectMeta<Namespace>>,
    priority_classes: Store<PriorityClass>,
    nodes: Store<PartialObjectMeta<Node>>,
    compiled: Arc<Mutex<ProfileCache>>,
}

impl ReflectorView {
    /// Starts the four reflectors on `client`; they run until the process stops.
    pub fn start(client: Client) -> Self {
        let profiles =
            spawn_reflector::<ClusterColocationProfile>(client.clone(), "clustercolocationprofiles");
        let namespaces = spawn_labels_reflector::<Namespace>(client.clone(), "namespaces");
        let priority_classes = spawn_reflector::<PriorityClass>(client.clone(), "priorityclasses");
        let nodes = spawn_labels_reflector::<Node>(client, "nodes");
        Self {
            profiles,
            namespaces,
            priority_classes,
            nodes,
            compiled: Arc::default(),
        }
    }

    /// Resolves once every cache has its initial list.
    pub async fn wait_until_ready(&self) -> Result<(), reflector::store::WriterDropped> {
        self.profiles.wait_until_ready().await?;
        self.namespaces.wait_until_ready().await?;
        self.priority_classes.wait_until_ready().await?;
        self.nodes.wait_until_ready().await
    }
}

fn spawn_reflector<K>(client: Client, what: &'static str) -> Store<K>
where
    K: Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let api: Api<K> = Api::all(client);
    tokio::spawn(run(
        what,
        reflector::reflector(writer, watcher(api, watcher::Config::default())),
    ));
    store
}

/// Objects per list page of the metadata-only watches.
const LIST_PAGE_SIZE: u32 = 100;

/// A metadata-only reflector keeping each object's name, labels and resourceVersion.
fn spawn_labels_reflector<K>(client: Client, what: &'static str) -> Store<PartialObjectMeta<K>>
where
    K: Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    // `Api<PartialObjectMeta<K>>` asks for `as=PartialObjectMetadata[List]`.
    let api: Api<PartialObjectMeta<K>> = Api::all(client);
    // Small list pages: a page's objects arrive with their `managedFields` (the server cannot
    // leave them out), and a smaller page keeps the allocator's high-water mark at start down.
    let config = watcher::Config::default().page_size(LIST_PAGE_SIZE);
    let events = watcher(api, config).modify(keep_name_and_labels);
    tokio::spawn(run(what, reflector::reflector(writer, events)));
    store
}

/// Drops every metadata field the webhook never reads (annotations and `managedFields` above
/// all, which on a Node can be tens of kilobytes).
fn keep_name_and_labels<K>(object: &mut PartialObjectMeta<K>) {
    let metadata = std::mem::take(&mut object.metadata);
    object.metadata = ObjectMeta {
        name: metadata.name,
        namespace: metadata.namespace,
        labels: metadata.labels,
        resource_version: metadata.resource_version,
        ..ObjectMeta::default()
    };
}

async fn run<K, S>(what: &'static str, stream: S)
where
    S: futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
{
    // Errors are logged once per outage by log_watch_errors; the watcher retries.
    let stream = koord_runtime::log_watch_errors(stream.default_backoff(), what);
    let mut stream = std::pin::pin!(stream.applied_objects());
    while stream.next().await.is_some() {}
}

impl ClusterView for ReflectorView {
    fn profiles(&self) -> Vec<Arc<CompiledProfile>> {
        let objects = self.profiles.state();
        let mut cache = self.compiled.lock().unwrap_or_else(|poison| poison.into_inner());
        let mut live = Vec::with_capacity(objects.len());
        for object in &objects {
            let name = object.metadata.name.clone().unwrap_or_default();
            let version = object.metadata.resource_version.clone().unwrap_or_default();
            if let Some((cached_version, compiled)) = cache.get(&name)
                && *cached_version == version
            {
                live.push(compiled.clone());
                continue;
            }
            let compiled = Arc::new(CompiledProfile::compile(
                name.clone(),
                object.metadata.annotations.clone().unwrap_or_default(),
                object.spec.clone(),
            ));
            cache.insert(name, (version, compiled.clone()));
            live.push(compiled);
        }
        if cache.len() > objects.len() {
            let names: std::collections::HashSet<_> =
                live.iter().map(|profile| profile.name.clone()).collect();
            cache.retain(|name, _| names.contains(name));
        }
        live
    }

    fn namespace_labels(&self, name: &str) -> Option<BTreeMap<String, String>> {
        self.namespaces
            .get(&reflector::ObjectRef::new(name))
            .map(|namespace| namespace.metadata.labels.clone().unwrap_or_default())
    }

    fn priority_class(&self, name: &str) -> Option<PriorityClassInfo> {
        self.priority_classes
            .get(&reflector::ObjectRef::new(name))
            .map(|class| PriorityClassInfo {
                value: class.value,
                preemption_policy: class.preemption_policy.clone(),
            })
    }

    fn node_labels(&self) -> Vec<(String, BTreeMap<String, String>)> {
        self.nodes
            .state()
            .iter()
            .map(|node| {
                (
                    node.metadata.name.clone().unwrap_or_default(),
                    node.metadata.labels.clone().unwrap_or_default(),
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_metadata_keeps_only_what_the_webhook_reads() {
        let mut node: PartialObjectMeta<Node> = serde_json::from_value(serde_json::json!({
            "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
            "metadata": {"name": "n1", "resourceVersion": "42", "uid": "u-1",
                "labels": {"pool": "batch"},
                "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
                "managedFields": [{"manager": "kubelet", "operation": "Apply", "apiVersion": "v1",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}}]}}))
        .unwrap();
        keep_name_and_labels(&mut node);
        assert_eq!(node.metadata.name.as_deref(), Some("n1"));
        assert_eq!(node.metadata.resource_version.as_deref(), Some("42"));
        assert_eq!(
            node.metadata.labels,
            Some(BTreeMap::from([("pool".to_string(), "batch".to_string())]))
        );
        assert_eq!(node.metadata.annotations, None);
        assert_eq!(node.metadata.managed_fields, None);
        assert_eq!(node.metadata.uid, None);
    }
}
