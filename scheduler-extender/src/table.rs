//! A watched kind kept as the few facts placement needs, by object name.
//!
//! A prioritize call looks at thousands of nodes; reading them from object caches would parse
//! every quantity of every Node and NodeMetric on every call. A table converts each object once,
//! when its watch event arrives, and a call then reads plain numbers under one lock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use kube::runtime::watcher;

#[derive(Debug)]
struct Inner<T> {
    rows: HashMap<String, T>,
    relist: Option<HashMap<String, T>>,
}

/// Name → converted object; cheap to clone.
#[derive(Debug)]
pub struct Table<T> {
    inner: Arc<RwLock<Inner<T>>>,
    ready: Arc<AtomicBool>,
}

impl<T> Clone for Table<T> {
    fn clone(&self) -> Self {
        Table {
            inner: self.inner.clone(),
            ready: self.ready.clone(),
        }
    }
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Table {
            inner: Arc::new(RwLock::new(Inner {
                rows: HashMap::new(),
                relist: None,
            })),
            ready: Arc::default(),
        }
    }
}

fn name_of<K: kube::Resource>(object: &K) -> String {
    object.meta().name.clone().unwrap_or_default()
}

impl<T> Table<T> {
    /// Applies one watcher event, converting objects with `convert`.
    pub fn apply<K: kube::Resource>(&self, event: watcher::Event<K>, convert: impl Fn(&K) -> T) {
        let mut inner = self.inner.write().unwrap_or_else(|poison| poison.into_inner());
        match event {
            watcher::Event::Apply(object) => {
                inner.rows.insert(name_of(&object), convert(&object));
            }
            watcher::Event::Delete(object) => {
                inner.rows.remove(&name_of(&object));
            }
            watcher::Event::Init => inner.relist = Some(HashMap::new()),
            watcher::Event::InitApply(object) => {
                if let Some(rows) = inner.relist.as_mut() {
                    rows.insert(name_of(&object), convert(&object));
                }
            }
            watcher::Event::InitDone => {
                if let Some(rows) = inner.relist.take() {
                    inner.rows = rows;
                }
                self.ready.store(true, Ordering::Release);
            }
        }
    }

    /// True once the first full list was seen.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Runs `f` with the rows (one read lock for a whole request).
    pub fn read<R>(&self, f: impl FnOnce(&HashMap<String, T>) -> R) -> R {
        let inner = self.inner.read().unwrap_or_else(|poison| poison.into_inner());
        f(&inner.rows)
    }

    /// Whether a row named `name` exists.
    pub fn contains(&self, name: &str) -> bool {
        self.read(|rows| rows.contains_key(name))
    }
}
