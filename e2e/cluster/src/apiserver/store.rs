//! In-memory storage: one ordered map per resource, a global resourceVersion counter, and a
//! bounded history of changes that watches replay from (410 Gone beyond it).
//!
//! Objects are stored as JSON values together with their serialized bytes, so lists and watch
//! events are byte concatenation rather than re-serialization (30,000 pods list in milliseconds).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::broadcast;

use super::error::{ApiError, ApiResult};
use super::resource::{GroupResource, Registry};

/// Object key inside one resource: (namespace or `""`, name).
pub type ObjectKey = (String, String);

/// A stored object: its JSON value, serialized bytes and resourceVersion.
#[derive(Debug)]
pub struct StoredObject {
    /// The object (with `metadata.resourceVersion` set).
    pub value: Value,
    /// `value` serialized.
    pub json: Bytes,
    /// resourceVersion of this revision.
    pub rv: u64,
}

/// Kind of change, as in a watch event's `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeType {
    /// Object created.
    Added,
    /// Object updated.
    Modified,
    /// Object removed.
    Deleted,
}

impl ChangeType {
    /// Watch event `type` string.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeType::Added => "ADDED",
            ChangeType::Modified => "MODIFIED",
            ChangeType::Deleted => "DELETED",
        }
    }
}

/// One committed change, kept in the history and broadcast to watches.
#[derive(Debug)]
pub struct Change {
    /// resourceVersion of the change.
    pub rv: u64,
    /// Which resource.
    pub resource: GroupResource,
    /// Namespace (`""` for cluster-scoped).
    pub namespace: String,
    /// Added, modified or deleted.
    pub kind: ChangeType,
    /// The object after the change (for deletions: the last state, with the deletion's rv).
    pub object: Arc<StoredObject>,
    /// The object before the change (modifications and deletions).
    pub previous: Option<Arc<StoredObject>>,
}

struct State {
    rv: u64,
    /// Changes with rv > compacted_rv are all in `history`.
    compacted_rv: u64,
    registry: Registry,
    objects: HashMap<GroupResource, BTreeMap<ObjectKey, Arc<StoredObject>>>,
    history: VecDeque<Arc<Change>>,
}

/// The whole cluster state behind one mutex (held only for map operations, never across I/O).
pub struct Store {
    state: Mutex<State>,
    history_capacity: usize,
    events: broadcast::Sender<Arc<Change>>,
}

/// Receiver of committed changes.
pub type ChangeReceiver = broadcast::Receiver<Arc<Change>>;

/// A page of a list.
pub struct ListPage {
    /// Matching objects, in key order.
    pub items: Vec<Arc<StoredObject>>,
    /// resourceVersion the list reflects.
    pub rv: u64,
    /// Key to continue after, if the page was cut by `limit`.
    pub next: Option<ObjectKey>,
    /// More matching objects follow this page.
    pub more: bool,
}

fn set_rv(value: &mut Value, rv: u64) {
    if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
    }
}

impl Store {
    /// An empty store serving the given registry; `history_capacity` bounds the replayable changes.
    pub fn new(registry: Registry, history_capacity: usize) -> Self {
        let (events, _) = broadcast::channel(history_capacity.clamp(1024, 1 << 16));
        Self {
            state: Mutex::new(State {
                rv: 1,
                compacted_rv: 0,
                registry,
                objects: HashMap::new(),
                history: VecDeque::new(),
            }),
            history_capacity: history_capacity.max(1),
            events,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned lock only means another request panicked mid-operation; the maps are
        // updated with single inserts, so the data is still consistent.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Current registry (cheap clone of `Arc`s).
    pub fn registry(&self) -> Registry {
        self.lock().registry.clone()
    }

    /// Change the registry (CRD installed or removed).
    pub fn update_registry<R>(&self, f: impl FnOnce(&mut Registry) -> R) -> R {
        f(&mut self.lock().registry)
    }

    /// Current global resourceVersion.
    pub fn current_rv(&self) -> u64 {
        self.lock().rv
    }

    /// Read one object.
    pub fn get(&self, res: &GroupResource, ns: &str, name: &str) -> Option<Arc<StoredObject>> {
        let st = self.lock();
        st.objects
            .get(res)?
            .get(&(ns.to_string(), name.to_string()))
            .cloned()
    }

    /// List objects, optionally in one namespace, filtered, at most `limit`, after `after`.
    pub fn list(
        &self,
        res: &GroupResource,
        namespace: Option<&str>,
        after: Option<&ObjectKey>,
        limit: Option<usize>,
        filter: &dyn Fn(&Value) -> bool,
    ) -> ListPage {
        use std::ops::Bound;
        let st = self.lock();
        let mut page = ListPage {
            items: Vec::new(),
            rv: st.rv,
            next: None,
            more: false,
        };
        let Some(map) = st.objects.get(res) else {
            return page;
        };
        let lower = match (after, namespace) {
            (Some(k), _) => Bound::Excluded(k.clone()),
            (None, Some(ns)) => Bound::Included((ns.to_string(), String::new())),
            (None, None) => Bound::Unbounded,
        };
        let limit = limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
        for (key, obj) in map.range((lower, Bound::Unbounded)) {
            if namespace.is_some_and(|ns| key.0 != ns) {
                break;
            }
            if !filter(&obj.value) {
                continue;
            }
            if page.items.len() >= limit {
                // One more match proves there is a next page; do not scan the rest.
                page.more = true;
                break;
            }
            page.items.push(obj.clone());
            if page.items.len() == limit {
                page.next = Some(key.clone());
            }
        }
        if !page.more {
            page.next = None;
        }
        page
    }

    fn record(&self, st: &mut State, change: Change) {
        let change = Arc::new(change);
        st.history.push_back(change.clone());
        while st.history.len() > self.history_capacity {
            if let Some(old) = st.history.pop_front() {
                st.compacted_rv = old.rv;
            }
        }
        // No receivers is fine.
        let _ = self.events.send(change);
    }

    fn stored(mut value: Value, rv: u64) -> ApiResult<Arc<StoredObject>> {
        set_rv(&mut value, rv);
        let json = serde_json::to_vec(&value).map_err(|e| ApiError::internal(e.to_string()))?;
        Ok(Arc::new(StoredObject {
            value,
            json: Bytes::from(json),
            rv,
        }))
    }

    /// Insert a new object; 409 AlreadyExists if the key is taken.
    pub fn create(&self, res: &GroupResource, key: ObjectKey, value: Value) -> ApiResult<Arc<StoredObject>> {
        let mut st = self.lock();
        let exists = st.objects.get(res).is_some_and(|m| m.contains_key(&key));
        if exists {
            return Err(ApiError::already_exists(res, &key.1));
        }
        self.commit(&mut st, res, &key, value, ChangeType::Added, None)
    }

    /// Replace an object if it is still at `base_rv` (409 otherwise, 404 if gone).
    pub fn replace(
        &self,
        res: &GroupResource,
        key: &ObjectKey,
        base_rv: u64,
        value: Value,
    ) -> ApiResult<Arc<StoredObject>> {
        let mut st = self.lock();
        let Some(cur) = st.objects.get(res).and_then(|m| m.get(key)).cloned() else {
            return Err(ApiError::not_found(res, &key.1));
        };
        if cur.rv != base_rv {
            return Err(ApiError::stale(res, &key.1));
        }
        if cur.value == value_with_rv(&value, cur.rv) {
            // No-op update: a real API server does not bump the resourceVersion.
            return Ok(cur);
        }
        self.commit(&mut st, res, key, value, ChangeType::Modified, Some(cur))
    }

    /// Stores `value` under `key` at the next resourceVersion and records the change.
    fn commit(
        &self,
        st: &mut State,
        res: &GroupResource,
        key: &ObjectKey,
        value: Value,
        kind: ChangeType,
        previous: Option<Arc<StoredObject>>,
    ) -> ApiResult<Arc<StoredObject>> {
        let rv = st.rv + 1;
        let obj = Self::stored(value, rv)?;
        st.rv = rv;
        st.objects
            .entry(res.clone())
            .or_default()
            .insert(key.clone(), obj.clone());
        self.record(
            st,
            Change {
                rv,
                resource: res.clone(),
                namespace: key.0.clone(),
                kind,
                object: obj.clone(),
                previous,
            },
        );
        Ok(obj)
    }

    /// Remove an object if it is still at `base_rv` (any rv when `None`).
    pub fn remove(
        &self,
        res: &GroupResource,
        key: &ObjectKey,
        base_rv: Option<u64>,
    ) -> ApiResult<Arc<StoredObject>> {
        let mut st = self.lock();
        let Some(cur) = st.objects.get(res).and_then(|m| m.get(key)).cloned() else {
            return Err(ApiError::not_found(res, &key.1));
        };
        if base_rv.is_some_and(|b| b != cur.rv) {
            return Err(ApiError::stale(res, &key.1));
        }
        let rv = st.rv + 1;
        let obj = Self::stored(cur.value.clone(), rv)?;
        st.rv = rv;
        if let Some(m) = st.objects.get_mut(res) {
            m.remove(key);
        }
        self.record(
            &mut st,
            Change {
                rv,
                resource: res.clone(),
                namespace: key.0.clone(),
                kind: ChangeType::Deleted,
                object: obj.clone(),
                previous: Some(cur),
            },
        );
        Ok(obj)
    }

    /// Keys of every object of a resource (optionally in a namespace).
    pub fn keys(&self, res: &GroupResource, namespace: Option<&str>) -> Vec<ObjectKey> {
        let st = self.lock();
        st.objects
            .get(res)
            .map(|m| {
                m.keys()
                    .filter(|k| namespace.is_none_or(|ns| k.0 == ns))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Resources that hold objects in a namespace (for namespace deletion).
    pub fn resources_with_objects(&self) -> Vec<GroupResource> {
        self.lock()
            .objects
            .iter()
            .filter(|(_, m)| !m.is_empty())
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Every current object of a resource plus a receiver for changes after them (atomic).
    pub fn snapshot_and_subscribe(
        &self,
        res: &GroupResource,
        namespace: Option<&str>,
    ) -> (Vec<Arc<StoredObject>>, u64, broadcast::Receiver<Arc<Change>>) {
        let st = self.lock();
        let rx = self.events.subscribe();
        let items = st
            .objects
            .get(res)
            .map(|m| {
                m.iter()
                    .filter(|(k, _)| namespace.is_none_or(|ns| k.0 == ns))
                    .map(|(_, v)| v.clone())
                    .collect()
            })
            .unwrap_or_default();
        (items, st.rv, rx)
    }

    /// Forgets the whole history, as an etcd compaction does: a watch resuming from any
    /// version before the current one gets 410 Gone and has to list again. Returns the
    /// current version.
    pub fn compact(&self) -> u64 {
        let mut st = self.lock();
        st.history.clear();
        st.compacted_rv = st.rv;
        st.rv
    }

    /// Changes after `rv` plus a receiver for later ones, or 410 if `rv` left the history.
    pub fn watch_from(&self, rv: u64) -> ApiResult<(Vec<Arc<Change>>, ChangeReceiver)> {
        let st = self.lock();
        if rv < st.compacted_rv {
            return Err(ApiError::gone(format!(
                "too old resource version: {rv} ({})",
                st.compacted_rv + 1
            )));
        }
        let rx = self.events.subscribe();
        let start = st.history.partition_point(|c| c.rv <= rv);
        Ok((st.history.range(start..).cloned().collect(), rx))
    }
}

fn value_with_rv(value: &Value, rv: u64) -> Value {
    let mut v = value.clone();
    set_rv(&mut v, rv);
    v
}
